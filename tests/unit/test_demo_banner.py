"""What ``jobqueue-exporter demo`` prints once it serves: where to look, and at which database."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.demo import demo_banner
from exporter.settings import WebSettings

DSN = "postgresql://postgres@127.0.0.1:40123/jobqueue"


def test_the_banner_names_the_status_page_the_metrics_and_the_demo_database() -> None:
    lines = demo_banner(DSN, WebSettings(), 10049).splitlines()
    assert lines[0] == "jobqueue-exporter demo: status page http://127.0.0.1:10049/"
    assert lines[1].split() == ["metrics", "http://127.0.0.1:10049/metrics"]
    assert lines[2].split()[:2] == ["database", DSN]
    assert "removes its database" in lines[3]


@pytest.mark.parametrize(
    ("listen", "base"),
    [
        (":10049", "http://127.0.0.1:8080"),
        ("0.0.0.0:10049", "http://127.0.0.1:8080"),
        ("[::]:10049", "http://127.0.0.1:8080"),
        ("[::1]:10049", "http://[::1]:8080"),
        ("localhost:10049", "http://localhost:8080"),
    ],
)
def test_the_urls_name_a_host_a_browser_on_this_machine_reaches(listen: str, base: str) -> None:
    web = WebSettings(listen_address=(listen,), telemetry_path="/m")
    text = demo_banner(DSN, web, 8080)
    assert f"status page {base}/\n" in text
    assert f"metrics   {base}/m\n" in text


def test_tls_from_the_web_config_file_makes_the_urls_https() -> None:
    assert "status page https://127.0.0.1:8443/" in demo_banner(DSN, WebSettings(), 8443, "https")


def test_a_password_in_the_dsn_would_be_masked() -> None:
    # The demo's own DSN has none (postgres is trusted on loopback); should one ever carry a
    # password, the banner goes through the redactor like every other text.
    text = demo_banner("postgresql://postgres:s3cret@127.0.0.1:1/jobqueue", WebSettings(), 1)
    assert "s3cret" not in text
    assert "postgresql://postgres:***@127.0.0.1:1/jobqueue" in text


def test_systemd_sockets_are_reached_on_loopback() -> None:
    web = replace(WebSettings(listen_address=("10.0.0.5:10049",)), systemd_socket=True)
    assert "http://127.0.0.1:10049/" in demo_banner(DSN, web, 10049)
