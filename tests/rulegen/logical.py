"""Promtool cases of the slot alerts (collect.counting: logical), one fire and near misses each.

Only the pod that streams exports the slot's series; a second pod appears where a case proves
that the alert does not add two reports of one slot (or one gap) together.
"""

from __future__ import annotations

from tests.rulegen import Case, s

MIB = 1024 * 1024
T = {"job": "jobqueue-exporter", "queue": "q1"}
LAG = "jobqueue_exporter_logical_lag_bytes"
RETAINED = "jobqueue_exporter_logical_retained_bytes"
SAFE = "jobqueue_exporter_logical_safe_wal_bytes"
GAPS = "jobqueue_exporter_logical_gaps_total"


def lag_cases() -> list[Case]:
    return [
        # Up to 256 MiB in 8m, 5m level, then 1 MiB a scrape: pending once past 256 MiB (14m30s),
        # firing 15m later. Pod b's report falls: the growth must be pod a's, not their sum's.
        Case(
            "JobQueueLogicalLagGrowing fires once the lag has grown past 256 MiB for 15m",
            "JobQueueLogicalLagGrowing",
            [
                s(LAG, f"0+{16 * MIB}x16 {256 * MIB}x10 {256 * MIB}+{MIB}x60"),
                s(LAG, f"{200 * MIB}-{2 * MIB}x90", instance="b"),
            ],
            fire_at="29m30s",
            value=287 * MIB,
            labels=T,
            silent_at=("23m", "29m"),
        ),
        Case(
            "JobQueueLogicalLagGrowing stays silent on lag that grows below 256 MiB or stays level",
            "JobQueueLogicalLagGrowing",
            [
                s(LAG, f"0+{2 * MIB}x120"),
                s(LAG, f"{300 * MIB}x120", queue="q2"),
            ],
            silent_at=("30m", "59m30s"),
            quiet_at=("30m", "59m30s"),
        ),
        # 10 bytes a scrape is growth too: a consumer that never confirms falls behind slowly
        # on a quiet database.
        Case(
            "JobQueueLogicalLagGrowing fires on slow but steady growth above 256 MiB",
            "JobQueueLogicalLagGrowing",
            [s(LAG, f"{300 * MIB}+10x60")],
            fire_at="15m30s",
            value=300 * MIB + 310,
            labels=T,
            silent_at=("15m",),
        ),
        # 5m of growth keeps deriv over 15m positive for 15m more: the alert fires as that
        # growth leaves the window, and resolves once the window holds the level alone.
        Case(
            "JobQueueLogicalLagGrowing reads growth over 15m: 5m of it fires at 15m30s",
            "JobQueueLogicalLagGrowing",
            [s(LAG, f"{300 * MIB}+{MIB}x10 {310 * MIB}x60")],
            fire_at="15m30s",
            value=310 * MIB,
            labels=T,
            silent_at=("15m", "20m"),
        ),
    ]


def near_cap_cases() -> list[Case]:
    return [
        Case(
            "JobQueueLogicalWalNearCap fires after 5m above 80 % of the slot's allowance",
            "JobQueueLogicalWalNearCap",
            [
                s(RETAINED, f"{500 * MIB}x10 {850 * MIB}x30"),
                s(SAFE, f"{500 * MIB}x10 {150 * MIB}x30"),
            ],
            fire_at="10m30s",
            value=0.85,
            labels=T,
            silent_at=("10m",),
        ),
        Case(
            "JobQueueLogicalWalNearCap stays silent at 80 % from two pods, and on 4m30s above it",
            "JobQueueLogicalWalNearCap",
            [
                s(RETAINED, f"{800 * MIB}x120"),
                s(SAFE, f"{200 * MIB}x120"),
                s(RETAINED, f"{800 * MIB}x120", instance="b"),
                s(SAFE, f"{200 * MIB}x120", instance="b"),
                s(RETAINED, f"{500 * MIB}x10 {900 * MIB}x8 {500 * MIB}x100", queue="q2"),
                s(SAFE, f"{500 * MIB}x10 {100 * MIB}x8 {500 * MIB}x100", queue="q2"),
            ],
            silent_at=("10m", "30m"),
            quiet_at=("10m", "30m"),
        ),
    ]


def unbounded_cases() -> list[Case]:
    # A sawtooth: the slot confirmed, restart_lsn moving every 5m; WAL retained stays bounded.
    saw = " ".join(f"{1536 * MIB}+{10 * MIB}x9" for _ in range(24))
    growing = f"{900 * MIB}+{2 * MIB}x200"
    return [
        # 4 MiB a minute from 900 MiB, no cap (no safe_wal_bytes): past 1 GiB at 31m; at 45m
        # the last quarter hour's low (30m: 1020 MiB) is 120 MiB over the high of the quarter
        # hour that ended 45m before (0m: 900 MiB), pending; a page 15m later, its value the
        # same difference (1080 - 960 MiB). Two pods report the slot over a rollout: one slot,
        # not twice its WAL.
        Case(
            "JobQueueLogicalWalUnbounded pages on a slot without a cap that grew for an hour",
            "JobQueueLogicalWalUnbounded",
            [s(RETAINED, growing), s(RETAINED, growing, instance="b")],
            fire_at="1h",
            value=120 * MIB,
            labels=T,
            silent_at=("59m30s",),
        ),
        # 1.6 MiB a minute: 46.9 MiB in the half hour between the two quarter hours, over 32.
        Case(
            "JobQueueLogicalWalUnbounded pages on growth just over 64 MiB an hour",
            "JobQueueLogicalWalUnbounded",
            [s(RETAINED, f"{1200 * MIB}+{800 * 1024}x200")],
            fire_at="1h",
            value=48000 * 1024,
            labels=T,
            silent_at=("59m30s",),
        ),
        # 1400 MiB until 10m, then confirmed down to 1100 MiB and stuck, growing 4 MiB a minute:
        # the growth counts once the whole quarter hour an hour ago is past the drop (70m30s),
        # a page at 85m30s.
        Case(
            "JobQueueLogicalWalUnbounded reads the high of a whole quarter hour an hour ago",
            "JobQueueLogicalWalUnbounded",
            [s(RETAINED, f"{1400 * MIB}x20 {1100 * MIB}+{2 * MIB}x200")],
            fire_at="1h25m30s",
            value=120 * MIB,
            labels=T,
            silent_at=("1h25m",),
        ),
        # The same growth under a cap is JobQueueLogicalWalNearCap's; a sawtooth is a slot in
        # use; 1 MiB a minute is 30 MiB in half an hour, under 32; under 1 GiB nothing pages,
        # however many pods report it; a step of exactly 32 MiB, or to exactly 1 GiB, is not
        # over them.
        Case(
            "JobQueueLogicalWalUnbounded stays silent with a cap, on a sawtooth, on slow or small "
            "growth",
            "JobQueueLogicalWalUnbounded",
            [
                s(RETAINED, growing),
                s(SAFE, f"{4096 * MIB}-{2 * MIB}x200"),
                s(RETAINED, saw, queue="q2"),
                s(RETAINED, f"{1536 * MIB}+{MIB // 2}x200", queue="q3"),
                s(RETAINED, f"{600 * MIB}+{2 * MIB}x200", queue="q4"),
                s(RETAINED, f"{600 * MIB}+{2 * MIB}x200", queue="q4", instance="b"),
                s(RETAINED, f"{1536 * MIB}x59 {1568 * MIB}x120", queue="q5"),
                s(RETAINED, f"{900 * MIB}x59 {1024 * MIB}x120", queue="q6"),
            ],
            silent_at=("1h", "1h10m", "1h30m"),
            quiet_at=("1h", "1h10m", "1h30m"),
        ),
    ]


def gap_cases() -> list[Case]:
    return [
        # Two gaps counted by running exporters (a at 75m30s, b after taking over at 80m30s):
        # two, not one, and the alert stays until the last leaves the hour.
        Case(
            "JobQueueLogicalGap fires on gaps counted by running exporters and stays an hour",
            "JobQueueLogicalGap",
            [s(GAPS, "0x150 1x200"), s(GAPS, "0x160 1x190", instance="b")],
            fire_at="2h",
            value=2,
            labels=T,
            silent_at=("1h15m", "2h21m"),
        ),
        Case(
            "JobQueueLogicalGap fires on one gap a running exporter counts",
            "JobQueueLogicalGap",
            [s(GAPS, "0x150 1x200")],
            fire_at="1h45m",
            value=1,
            labels=T,
            silent_at=("1h15m",),
        ),
        # A slot lost while the exporter was stopped: the new pod's counter starts at 1, which
        # increase() cannot see. Both pods of a rollout report that one gap.
        Case(
            "JobQueueLogicalGap fires on a gap reported in a pod's first scrape, for an hour",
            "JobQueueLogicalGap",
            [
                s(GAPS, "1x200"),
                s(GAPS, "1x200", instance="b"),
                s(GAPS, "0x200", queue="q2"),
            ],
            fire_at="30m",
            value=1,
            labels=T,
            silent_at=("1h",),
            quiet_at=("30m",),
        ),
    ]


def logical_cases() -> list[Case]:
    return [*lag_cases(), *near_cap_cases(), *unbounded_cases(), *gap_cases()]
