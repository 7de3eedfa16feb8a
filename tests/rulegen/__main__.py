"""Write the generated promtool test files: ``python -m tests.rulegen``."""

from __future__ import annotations

from tests.rulegen.files import write_all

if __name__ == "__main__":
    write_all()
