"""docs/deploy.md's instructions for kube-prometheus-stack, run or cross-checked as written.

The page opens with the two values the shipped rules hold placeholders for; its documented
render-rules command is run through the real command line. The image section's build tag,
``kustomize edit`` target and ``images:`` block must name the same image, and the
placeholder they replace must be the one the exporter kustomization and the Deployments use.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import yaml

from exporter.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
K8S = ROOT / "deploy" / "kubernetes"


def sections() -> dict[str, str]:
    """The page's ``## `` sections by title, in order."""
    parts = DEPLOY_DOC.read_text().split("\n## ")[1:]
    return {part.split("\n", 1)[0]: part for part in parts}


def code_blocks(section: str, language: str) -> list[str]:
    """The bodies of a section's fenced blocks in one language."""
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.DOTALL)


def commands(block: str) -> list[list[str]]:
    """A shell block as argument lists, continuations joined, variables it assigns expanded."""
    variables: dict[str, str] = {}
    found = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 1 and re.fullmatch(r"[A-Z_]+=.*", words[0]):
            name, value = words[0].split("=", 1)
            variables[name] = value
            continue
        for name, value in variables.items():
            words = [word.replace(f"${name}", value) for word in words]
        if words:
            found.append(words)
    return found


def test_the_page_opens_with_the_dashboard_url_and_the_prometheusrule_labels() -> None:
    title, first = next(iter(sections().items()))
    assert title.startswith("First"), f"docs/deploy.md's first section is {title!r}"
    assert "`--alerts.dashboard-url`" in first
    assert "`--prometheusrule.label KEY=VALUE`" in first
    assert "release=kube-prometheus-stack" in first


def test_the_documented_dashboard_url_reaches_every_alert(tmp_path: Path) -> None:
    first = next(iter(sections().values()))
    (block,) = code_blocks(first, "sh")
    plain = [c for c in commands(block) if "--format" not in c]
    assert len(plain) == 1, plain
    args = plain[0]
    assert args[:2] == ["jobqueue-exporter", "render-rules"]
    (url,) = [a.split("=", 1)[1] for a in args if a.startswith("--alerts.dashboard-url=")]
    uid = json.loads((ROOT / "dashboards" / "jobqueue.json").read_text())["uid"]
    assert f"/d/{uid}/" in url, "the documented URL must open the shipped dashboard's uid"
    output = tmp_path / "rules.yml"
    args[args.index("--output") + 1] = str(output)
    assert main(args[1:], environ={}) == 0
    alerts = [
        rule
        for group in yaml.safe_load(output.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]
    assert alerts
    for rule in alerts:
        assert rule["annotations"]["dashboard_url"].startswith(url), rule["alert"]


def test_the_image_section_builds_pushes_and_points_images_at_one_image() -> None:
    section = sections()["Build the image"]
    assert "[Dockerfile](../Dockerfile)" in section
    shell = [c for block in code_blocks(section, "sh") for c in commands(block)]
    (build,) = [c for c in shell if c[:2] == ["docker", "build"]]
    tag = build[build.index("-t") + 1]
    assert build[-1] == "."
    assert ["docker", "push", tag] in shell
    (edit,) = [c for c in shell if c[:3] == ["kustomize", "edit", "set"]]
    placeholder, target = edit[-1].split("=")
    assert target == tag
    ((documented,),) = [yaml.safe_load(b)["images"] for b in code_blocks(section, "yaml")]
    assert f"{documented['newName']}:{documented['newTag']}" == tag
    # The entry keeps the name the shipped kustomization and Deployments use.
    (shipped,) = yaml.safe_load((K8S / "exporter" / "kustomization.yaml").read_text())["images"]
    assert documented["name"] == placeholder == shipped["name"]
    (cd,) = [c for c in shell if c[0] == "cd"]
    assert cd == ["cd", "deploy/kubernetes/exporter"], "kustomize edit runs where images: is"
    deployments = [K8S / "exporter" / "deployment.yaml", K8S / "example" / "queue-worker.yaml"]
    for path in deployments:
        assert f"image: {placeholder}:" in path.read_text(), path.name
