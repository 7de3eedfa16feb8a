"""The command line (flags, exit codes, --config.check, render-rules) and the log formatting."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exporter import __version__
from exporter.cli import main, settings_from_namespace
from exporter.settings.flags import build_parser

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "hunter2-S3cret"
DSN_WITH_PASSWORD = f"postgresql://app:{PASSWORD}@db.example:5432/queue"
GOOD = "collect:\n  interval: 5s\n  job_types: {1: send_email}\n"
BAD = "collect:\n  intervall: 5s\n  timeout: soon\n"
FILE_ONLY = (
    "OK (the file only: no DSN in the file, environment or flags to check the queues against)"
)


def write(tmp_path: Path, text: str, name: str = "config.yml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


pytestmark = pytest.mark.usefixtures("restore_logging")


# --- Flags to settings --------------------------------------------------------------------------


def test_go_style_flags_reach_the_settings(tmp_path: Path) -> None:
    namespace = build_parser().parse_args(
        [
            "--collect.interval=1s",
            "--collect.statement-timeout=2s",
            "--collect.timeout",
            "3s",
            "--collect.done-count",
            "--collect.job-types=1=send_email,7=scrape",
            "--web.listen-address=127.0.0.1:0",
            "--web.config.file=/etc/web.yml",
            "--database.max-connections=3",
            "--log.format=json",
        ]
    )
    loaded = settings_from_namespace(namespace, {})
    assert loaded.queues[0].collect.interval == 1.0
    assert loaded.queues[0].collect.statement_timeout == 2.0
    assert loaded.queues[0].collect.timeout == 3.0
    assert loaded.queues[0].collect.done_count is True
    assert loaded.queues[0].collect.job_types == {1: "send_email", 7: "scrape"}
    assert loaded.web.listen_address == ("127.0.0.1:0",)
    assert loaded.web.config_file == "/etc/web.yml"
    assert loaded.queues[0].database.max_connections == 3
    assert loaded.log.format == "json"
    rules = build_parser("render-rules").parse_args(["--alerts.stuck-for=10m"])
    assert settings_from_namespace(rules, {}).alerts.stuck_for == 600.0


def test_config_file_from_flag_or_environment_and_flag_wins(tmp_path: Path) -> None:
    path = write(tmp_path, "collect:\n  interval: 30s\n  done_count: true\n")
    environ = {"JOBQUEUE_EXPORTER_CONFIG_FILE": path, "JOBQUEUE_EXPORTER_COLLECT_INTERVAL": "20s"}
    from_env = settings_from_namespace(build_parser().parse_args([]), environ)
    assert (
        from_env.queues[0].collect.done_count is True
    )  # the file named by the environment was read
    assert from_env.queues[0].collect.interval == 20.0  # environment over file
    flagged = settings_from_namespace(
        build_parser().parse_args(["--no-collect.done-count", "--collect.interval=10s"]), environ
    )
    assert flagged.queues[0].collect.done_count is False
    assert flagged.queues[0].collect.interval == 10.0


# --- Exit codes and messages --------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"], {}) == 0
    assert capsys.readouterr().out == f"jobqueue-exporter {__version__}\n"


def test_config_check_good_and_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = write(tmp_path, GOOD), write(tmp_path, BAD, "bad.yml")
    assert main(["--config.check", good], {}) == 0
    assert capsys.readouterr().out == f"{good}: {FILE_ONLY}\n"
    assert main(["--config.check", bad], {}) == 1
    err = capsys.readouterr().err
    assert f"{bad}: collect.intervall: unknown setting (did you mean collect.interval?)" in err
    assert f"{bad}: collect.timeout: expected a duration" in err
    assert main(["--config.check", str(tmp_path / "missing.yml")], {}) == 1
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.daemon
def test_config_check_in_a_real_process(tmp_path: Path) -> None:
    good, bad = write(tmp_path, GOOD), write(tmp_path, BAD, "bad.yml")
    ok = subprocess.run(
        [sys.executable, "-m", "exporter", "--config.check", good],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (ok.returncode, ok.stdout) == (0, f"{good}: {FILE_ONLY}\n")
    failed = subprocess.run(
        [sys.executable, "-m", "exporter", "--config.check", bad],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert failed.returncode == 1
    assert "collect.intervall: unknown setting" in failed.stderr


def test_bad_configuration_exits_2_naming_the_field_without_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    environ = {"DATABASE_URL": DSN_WITH_PASSWORD, "JOBQUEUE_EXPORTER_LOG_LEVEL": "loud"}
    assert main(["--collect.interval=fast"], environ) == 2
    err = capsys.readouterr().err
    assert "collect.interval: expected a duration such as 500ms, 15s or 2m, got 'fast'" in err
    assert "log.level: expected one of debug, info, warn, error, got 'loud'" in err
    assert PASSWORD not in err


def test_dsn_in_a_wrong_setting_is_not_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([f"--web.listen-address={DSN_WITH_PASSWORD}"], {}) == 2
    captured = capsys.readouterr()
    assert "web.listen_address" in captured.err
    assert PASSWORD not in captured.err + captured.out


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--collect.intervall=5s"], {}) == 2
    assert "unknown flag --collect.intervall (did you mean --collect.interval?)" in (
        capsys.readouterr().err
    )
    assert main(["frobnicate"], {}) == 2
    assert "unexpected argument 'frobnicate'" in capsys.readouterr().err
    assert main(["run", "--output", "x.yml"], {}) == 2
    assert "--output is a flag of render-rules, not of run" in capsys.readouterr().err


def test_run_without_dsn_lists_the_four_ways(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run"], {}) == 2
    err = capsys.readouterr().err
    for way in ("--database.dsn", "JOBQUEUE_EXPORTER_DSN", "DATABASE_URL", "database.dsn in the"):
        assert way in err


def test_render_rules_needs_no_dsn_and_uses_alert_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--alerts.evaluation-interval=1m", "--alerts.baseline-evaluation-interval=10m"]
    assert main(["render-rules", *flags], {}) == 0
    rules = yaml.safe_load(capsys.readouterr().out)
    intervals = {group["name"]: group["interval"] for group in rules["groups"]}
    # The week-old baselines have a slower group of their own; the rest follow the flag.
    assert intervals == {
        "jobqueue-exporter.rules": "1m",
        "jobqueue-exporter.baselines": "10m",
        "jobqueue-exporter.alerts": "1m",
    }

    output = tmp_path / "rules.yml"
    code = main(["render-rules", "--format", "prometheusrule", "--output", str(output)], {})
    assert code == 0
    resource = yaml.safe_load(output.read_text(encoding="utf-8"))
    assert resource["kind"] == "PrometheusRule"
    assert main(["render-rules", "--output", str(tmp_path / "no" / "dir.yml")], {}) == 1


# --- Logging ----------------------------------------------------------------------------------


def test_main_sets_up_logging_that_redacts_the_dsn_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["render-rules", "--log.format=json"], {"DATABASE_URL": DSN_WITH_PASSWORD}) == 0
    capsys.readouterr()
    logging.getLogger("exporter.test").warning("password is %s", PASSWORD)
    err = capsys.readouterr().err
    assert json.loads(err)["msg"] == "password is ***"


# --- What a newcomer sees, from the installed program -------------------------------------


def _program(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "80", **(env or {})},
    )  # fmt: skip


@pytest.mark.daemon
def test_help_fits_the_readmes_150_lines_and_leaves_the_rule_flags_to_render_rules() -> None:
    run_help, rules_help = _program("--help"), _program("render-rules", "--help")
    assert (run_help.returncode, rules_help.returncode) == (0, 0)
    # The README: "lists the runtime flags (under 150 lines)", as `--help | wc -l` counts them.
    assert len(run_help.stdout.splitlines()) < 150
    # Seven commands do not fit an 80-column usage line; the list below it names each one.
    assert run_help.stdout.startswith("usage: jobqueue-exporter [COMMAND] [FLAGS]")
    assert "  logical-setup  " in run_help.stdout
    assert "--collect.interval DURATION" in run_help.stdout
    assert "--alerts." not in run_help.stdout
    assert "--alerts.stuck-for DURATION" in rules_help.stdout
    assert "--collect." not in rules_help.stdout


@pytest.mark.daemon
def test_a_misspelled_flag_exits_2_in_two_lines_with_a_suggestion() -> None:
    result = _program("--collect.intervall", "5s")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "jobqueue-exporter: error: unknown flag --collect.intervall "
        "(did you mean --collect.interval?)",
        "Run 'jobqueue-exporter --help' for the flags, or see docs/configuration.md.",
    ]


@pytest.mark.parametrize(
    ("dsn", "why"),
    [
        (f"postgresql://u:{PASSWORD}@127.0.0.1:notaport/db", "the port is not a number"),
        (f"postgresql://u:{PASSWORD}@127.0.0.1/db?sslmode=on", "sslmode must be one of"),
        (f"postgresql://u:{PASSWORD}@[::1/db", "the host part is not valid"),
        (f"postgresql:/u:{PASSWORD}@127.0.0.1:55433/app", "the scheme must be followed by '//'"),
    ],
)
@pytest.mark.parametrize("source", ["flag", "environment"])
@pytest.mark.daemon
def test_a_dsn_that_cannot_work_stops_the_start_naming_the_key_not_the_password(
    dsn: str, why: str, source: str
) -> None:
    if source == "flag":
        result = _program("--database.dsn", dsn, "--web.listen-address=127.0.0.1:0")
    else:
        result = _program("--web.listen-address=127.0.0.1:0", env={"DATABASE_URL": dsn})
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0] == "jobqueue-exporter: configuration error:"
    assert lines[1].startswith(f"database.dsn: {why}")
    assert PASSWORD not in result.stdout + result.stderr


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
@pytest.mark.daemon
def test_a_real_start_logs_the_version_then_one_line_per_queue(fmt: str) -> None:
    # Port 1 refuses at once: the exporter starts and serves; collection fails, logged later.
    dsn = f"postgresql://app:{PASSWORD}@127.0.0.1:1/orders"
    command = [sys.executable, "-m", "exporter", f"--log.format={fmt}", "--collect.interval=1m",
               "--web.listen-address=127.0.0.1:0"]  # fmt: skip
    environ = {"PATH": "/usr/bin:/bin", "JOBQUEUE_EXPORTER_DSN": dsn}
    lines: list[str] = []
    with subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True, env=environ) as (
        process
    ):
        try:
            assert process.stderr is not None
            for line in process.stderr:  # ends with the process; the test's timeout bounds it
                lines.append(line)
                if "listening" in line:
                    break
        finally:
            process.terminate()
            process.communicate(timeout=30)
    text = "".join(lines)
    assert PASSWORD not in text
    if fmt == "json":
        records = [json.loads(line) for line in lines[:2]]
        assert [r["msg"] for r in records] == ["starting jobqueue-exporter", "watching queue"]
        assert records[0]["version"] == __version__
        assert {k: records[1][k] for k in ("queue", "profile", "table", "interval")} == {
            "queue": "orders", "profile": "default", "table": "job", "interval": "1m",
        }  # fmt: skip
        assert records[1]["leader_election"] is True
    else:
        assert "level=INFO source=cli.py" in lines[0]
        assert lines[0].rstrip().endswith(f'msg="starting jobqueue-exporter" version={__version__}')
        assert (
            lines[1]
            .rstrip()
            .endswith(
                'msg="watching queue" queue=orders profile=default table=job interval=1m '
                "leader_election=true"
            )
        )
