"""What a simulated worker writes into a completed job's result: costs and run time, and
sometimes, on purpose, something the exporter must not take at face value."""

from __future__ import annotations

import random
from typing import Any

# Results the exporter must not take at face value; missing_cost is absent, not malformed (a
# worker that priced nothing), and its run time then comes from the row.
MALFORMED_KINDS = ("missing_cost", "string_value", "negative", "nan_string", "not_object", "bool")


def job_result(rng: random.Random, duration: float, p_malformed: float) -> Any:
    """A completed job's result jsonb, malformed with probability p_malformed."""
    ai = round(rng.uniform(0.001, 0.05), 4)
    proxy = round(rng.uniform(0.0, 0.01), 4)
    other = round(rng.choice((0.0, rng.uniform(0.0, 0.005))), 4)
    cost: dict[str, Any] = {
        "ai_usd": ai,
        "proxy_usd": proxy,
        "total_usd": round(ai + proxy + other, 4),
    }
    metrics: dict[str, Any] = {"duration_ms": int(duration * 1000), "cost": cost}
    result: dict[str, Any] = {
        "outcome": rng.choice(("found", "found", "found", "not_found", "blocked")),
        "lowest": {"price": rng.randint(1000, 99999)},
        "metrics": metrics,
    }
    if rng.random() >= p_malformed:
        return result
    kind = rng.choice(MALFORMED_KINDS)
    if kind == "missing_cost":
        del metrics["cost"]
    elif kind == "string_value":
        cost["ai_usd"] = str(ai)
    elif kind == "negative":
        cost["proxy_usd"] = -proxy - 0.001
    elif kind == "nan_string":
        cost["total_usd"] = "NaN"
    elif kind == "bool":
        metrics["duration_ms"] = True
    else:
        return [result["outcome"], ai]
    return result
