"""One firing case and at least one near-miss silent case per alert (default settings).

Counters come from the elected leader only; gauges may come from two exporter pods (a, b)
that read the same table. Near misses sit on or just below the threshold.
"""

from __future__ import annotations

from tests.rulegen import Case, s
from tests.rulegen.logical import logical_cases

T = {"job": "jobqueue-exporter", "queue": "q1"}


def lab(**extra: str) -> dict[str, str]:
    return {**T, **extra}


def gauge_cases() -> list[Case]:
    return [
        Case(
            "JobQueueJobsStuck fires once for two pods when expired leases stay for 5m+5m",
            "JobQueueJobsStuck",
            [
                s("jobqueue_stuck_jobs", "0x3 1x40", job_type="crawl", reason="lease_expired"),
                s(
                    "jobqueue_stuck_jobs",
                    "0x3 1x40",
                    job_type="crawl",
                    reason="lease_expired",
                    instance="b",
                ),
                s("jobqueue_stuck_jobs", "0x3 1x40", job_type="crawl", reason="overrun"),
            ],
            fire_at="12m",
            value=1,
            labels=lab(job_type="crawl", reason="lease_expired"),
            silent_at=("11m30s",),
        ),
        Case(
            "JobQueueJobsStuck stays silent on a reaped blip and on overruns",
            "JobQueueJobsStuck",
            [
                s("jobqueue_stuck_jobs", "0x3 1x8 0x40", job_type="blip", reason="lease_expired"),
                s("jobqueue_stuck_jobs", "5x40", job_type="crawl", reason="overrun"),
                s("jobqueue_stuck_jobs", "5x40", job="other", job_type="x", reason="lease_expired"),
            ],
            silent_at=("10m", "15m", "20m"),
        ),
        Case(
            "JobQueueJobOverrun fires 5m after a run passes 30m, through 3 minutes of failed scrapes",
            "JobQueueJobOverrun",
            [
                s(
                    "jobqueue_running_oldest_seconds",
                    "0+30x61 stale _x5 2040+30x30",
                    job_type="crawl",
                )
            ],
            fire_at="35m30s",
            value=2130,
            labels=lab(job_type="crawl"),
            silent_at=("35m",),
        ),
        Case(
            "JobQueueJobOverrun stays silent on a run of exactly 30m",
            "JobQueueJobOverrun",
            [s("jobqueue_running_oldest_seconds", "0+30x60 0x40", job_type="crawl")],
            silent_at=("31m", "36m", "45m"),
        ),
        Case(
            "JobQueueReaperNotRunning fires once an expired lease is unreaped past 10m for 5m",
            "JobQueueReaperNotRunning",
            [
                s(
                    "jobqueue_lease_expired_oldest_seconds",
                    "0+30x23 stale _x5 900+30x40",
                    job_type="crawl",
                )
            ],
            fire_at="15m30s",
            value=930,
            labels=lab(job_type="crawl"),
            silent_at=("15m",),
        ),
        Case(
            "JobQueueReaperNotRunning stays silent at exactly 10m",
            "JobQueueReaperNotRunning",
            [s("jobqueue_lease_expired_oldest_seconds", "0+30x20 0x40", job_type="crawl")],
            silent_at=("16m", "25m"),
        ),
        Case(
            "JobQueueBacklogStale fires through one failed scrape in nine (gap-robust)",
            "JobQueueBacklogStale",
            [
                s(
                    "jobqueue_oldest_ready_wait_seconds",
                    "0+30x30 stale 960+30x7 stale _x5 1380+30x7 stale 1650+30x20",
                    job_type="crawl",
                )
            ],
            fire_at="21m",
            value=1170,
            labels=lab(job_type="crawl"),
            silent_at=("20m30s",),
        ),
        Case(
            "JobQueueBacklogStale stays silent at exactly 15m",
            "JobQueueBacklogStale",
            [s("jobqueue_oldest_ready_wait_seconds", "0+30x30 900x20 0x30", job_type="crawl")],
            silent_at=("21m", "30m"),
        ),
        Case(
            "JobQueueDeadLetterSize fires when more than 100 dead jobs stand for 5m+30m",
            "JobQueueDeadLetterSize",
            [s("jobqueue_jobs", "_x9 101x30 stale _x5 101x60", job_type="crawl", status="dead")],
            fire_at="34m30s",
            value=101,
            labels=lab(job_type="crawl", status="dead"),
            silent_at=("34m",),
        ),
        Case(
            "JobQueueDeadLetterSize stays silent at exactly 100 and on a short peak",
            "JobQueueDeadLetterSize",
            [
                s("jobqueue_jobs", "100x100", job_type="crawl", status="dead"),
                s("jobqueue_jobs", "0 500x5 0x100", job_type="peak", status="dead"),
                s("jobqueue_jobs", "500 0 " * 50, job_type="flicker", status="dead"),
                s("jobqueue_jobs", "500x100", job_type="crawl", status="pending"),
            ],
            silent_at=("40m", "50m"),
        ),
    ]


def progress_cases() -> list[Case]:
    ready = "jobqueue_jobs"
    return [
        Case(
            "JobQueueNoProgress fires when jobs wait and no worker is alive",
            "JobQueueNoProgress",
            [
                s(ready, "50x60", job_type="crawl", status="pending"),
                s(ready, "50x60", job_type="crawl", status="pending", instance="b"),
                s(ready, "0x60", job_type="crawl", status="running"),
                s("jobqueue_jobs_completed_total", "0x60", job_type="crawl"),
                # Reaper reclaims are no progress.
                s(
                    "jobqueue_job_failures_total",
                    "0+1x60",
                    job_type="crawl",
                    reason="lease_expired",
                ),
            ],
            fire_at="5m",
            value=50,
            labels=lab(job_type="crawl"),
            silent_at=("4m30s",),
        ),
        Case(
            "JobQueueNoProgress stays silent on long jobs under valid leases, completions, failures",
            "JobQueueNoProgress",
            [
                # Four workers on 30-minute jobs: nothing completes for 30m, leases are valid.
                s(ready, "50x100", job_type="long", status="pending"),
                s(ready, "4x100", job_type="long", status="running"),
                s("jobqueue_stuck_jobs", "0x100", job_type="long", reason="lease_expired"),
                s("jobqueue_jobs_completed_total", "0x100", job_type="long"),
                s(ready, "50x100", job_type="busy", status="pending"),
                s("jobqueue_jobs_completed_total", "0+1x100", job_type="busy"),
                s(ready, "50x100", job_type="failing", status="pending"),
                s("jobqueue_job_failures_total", "0+1x100", job_type="failing", reason="error"),
            ],
            silent_at=("20m", "45m"),
        ),
        Case(
            "JobQueueNoProgress fires when the only running jobs hold expired leases",
            "JobQueueNoProgress",
            [
                s(ready, "50x60", job_type="dead", status="pending"),
                s(ready, "4x60", job_type="dead", status="running"),
                s("jobqueue_stuck_jobs", "4x60", job_type="dead", reason="lease_expired"),
                s("jobqueue_jobs_completed_total", "0x60", job_type="dead"),
            ],
            fire_at="5m",
            value=50,
            labels=lab(job_type="dead"),
            silent_at=("4m30s",),
        ),
        Case(
            "JobQueueSlowDrain fires when the backlog grows and would take over 2h to drain",
            "JobQueueSlowDrain",
            [
                s(ready, "1000+10x120", job_type="crawl", status="pending"),
                # 0.2 completions/s: 1300 ready jobs take about 6500s, more so early on.
                s("jobqueue_jobs_completed_total", "0+6x120", job_type="crawl"),
            ],
            fire_at="16m",
            value=12375,
            labels=lab(job_type="crawl"),
            silent_at=("15m",),
        ),
        Case(
            "JobQueueSlowDrain stays silent on a shrinking backlog and a fast drain",
            "JobQueueSlowDrain",
            [
                s(ready, "5000-10x120", job_type="shrink", status="pending"),
                s("jobqueue_jobs_completed_total", "0+3.75x120", job_type="shrink"),
                # About an hour to drain: growing, but under the 2h limit.
                s(ready, "1000+1x120", job_type="hour", status="pending"),
                s("jobqueue_jobs_completed_total", "0+7.5x120", job_type="hour"),
                # Flat backlog, slow drain: not growing.
                s(ready, "2000x120", job_type="flat", status="pending"),
                s("jobqueue_jobs_completed_total", "0+1x120", job_type="flat"),
                s(ready, "100+1x120", job_type="fast", status="pending"),
                s("jobqueue_jobs_completed_total", "0+30x120", job_type="fast"),
            ],
            silent_at=("45m", "60m"),
        ),
    ]


def counter_cases() -> list[Case]:
    fail = "jobqueue_job_failures_total"
    done = "jobqueue_jobs_completed_total"
    vanished = "jobqueue_exporter_jobs_vanished_total"
    return [
        Case(
            "JobQueueDeadlineKills warning fires above 5 per hour",
            "JobQueueDeadlineKills",
            [s(fail, "0+0.0625x200", job_type="crawl", reason="deadline")],
            fire_at="1h10m",
            value=7.5,
            labels=lab(job_type="crawl", reason="deadline"),
            severities=("warning",),
            silent_at=("30m",),
        ),
        Case(
            "JobQueueDeadlineKills critical and warning twins fire above 30 per hour",
            "JobQueueDeadlineKills",
            [s(fail, "0+0.3125x200", job_type="crawl", reason="deadline")],
            fire_at="1h30m",
            value=37.5,
            labels=lab(job_type="crawl", reason="deadline"),
            silent_at=("5m",),
        ),
        Case(
            "JobQueueDeadlineKills counts both pods across a rollout (sum, not max)",
            "JobQueueDeadlineKills",
            [
                s(fail, "0+0.0625x120 _x100", job_type="crawl", reason="deadline"),
                s(fail, "_x120 0+0.0625x100", job_type="crawl", reason="deadline", instance="b"),
            ],
            fire_at="1h30m",
            value=7.5,
            labels=lab(job_type="crawl", reason="deadline"),
            severities=("warning",),
        ),
        Case(
            "JobQueueDeadlineKills critical counts both pods across a rollout",
            "JobQueueDeadlineKills",
            [
                s(fail, "0+0.3125x120 _x100", job_type="crawl", reason="deadline"),
                s(fail, "_x120 0+0.3125x100", job_type="crawl", reason="deadline", instance="b"),
            ],
            fire_at="1h30m",
            value=37.7,
            labels=lab(job_type="crawl", reason="deadline"),
        ),
        Case(
            "JobQueueDeadlineKills stays silent at 4.5 per hour and on error failures",
            "JobQueueDeadlineKills",
            [
                s(fail, "0+0.0375x300", job_type="crawl", reason="deadline"),
                s(fail, "0+1x300", job_type="crawl", reason="error"),
            ],
            silent_at=("1h30m", "2h30m"),
        ),
        Case(
            "JobQueueHighFailureRatio fires when 2 of 3 attempts fail",
            "JobQueueHighFailureRatio",
            [
                s(fail, "0+2x150", job_type="crawl", reason="error"),
                s(done, "0+1x150", job_type="crawl"),
            ],
            fire_at="20m",
            value=2 / 3,
            labels=lab(job_type="crawl"),
            silent_at=("15m",),
        ),
        Case(
            "JobQueueHighFailureRatio stays silent at exactly half and on low volume",
            "JobQueueHighFailureRatio",
            [
                s(fail, "0+1x150", job_type="half", reason="error"),
                s(done, "0+1x150", job_type="half"),
                s(fail, "0+0.125x150", job_type="rare", reason="error"),
            ],
            silent_at=("30m", "1h10m"),
        ),
        Case(
            "JobQueueDeadLetterGrowing fires above 10 dead jobs per hour",
            "JobQueueDeadLetterGrowing",
            [
                s("jobqueue_jobs_dead_total", "0+0.0625x200", job_type="crawl", reason="error"),
                s("jobqueue_jobs_dead_total", "0+0.0625x200", job_type="crawl", reason="deadline"),
            ],
            fire_at="1h",
            value=15,
            labels=lab(job_type="crawl"),
            silent_at=("20m",),
        ),
        Case(
            "JobQueueDeadLetterGrowing stays silent at 9.375 per hour",
            "JobQueueDeadLetterGrowing",
            [s("jobqueue_jobs_dead_total", "0+0.078125x300", job_type="crawl", reason="error")],
            silent_at=("1h30m", "2h30m"),
        ),
        Case(
            "JobQueueWorkerCrashStorm fires when half the attempts end with the reaper",
            "JobQueueWorkerCrashStorm",
            [
                s(fail, "0+1x60", job_type="crawl", reason="lease_expired"),
                s(done, "0+1x60", job_type="crawl"),
            ],
            fire_at="8m",
            value=0.5,
            labels=lab(job_type="crawl"),
            silent_at=("5m",),
        ),
        Case(
            "JobQueueWorkerCrashStorm stays silent at a 20% share and below 5 reclaims",
            "JobQueueWorkerCrashStorm",
            [
                s(fail, "0+1x60", job_type="share", reason="lease_expired"),
                s(done, "0+4x60", job_type="share"),
                s(fail, "0+0.125x60", job_type="few", reason="lease_expired"),
                s(done, "0+0.125x60", job_type="few"),
            ],
            silent_at=("10m", "25m"),
        ),
        Case(
            "JobQueueMalformedRows fires when a tenth of the completions lose their total cost",
            "JobQueueMalformedRows",
            [
                # A rollout: the old and the new pod each read half of them, summed.
                s("jobqueue_exporter_malformed_rows_total", "0+0.5x200", field="total_usd"),
                s(
                    "jobqueue_exporter_malformed_rows_total",
                    "0+0.5x200",
                    field="total_usd",
                    instance="b",
                ),
                s("jobqueue_exporter_malformed_rows_total", "0+0.25x200", field="result"),
                s(done, "0+5x200", job_type="crawl"),
                s(done, "0+5x200", job_type="mail"),
            ],
            fire_at="16m",
            value=0.1,
            labels=lab(field="total_usd"),
            silent_at=("15m",),
        ),
        # Every completion has a malformed duration, and a few a malformed cost too: a share
        # of rows is at most 100 %. Summed over the fields (the old rule) it read 104 %. Read
        # after the first hour, when both windows are full.
        Case(
            "JobQueueMalformedRows reads each field's share of the rows, never above 100%",
            "JobQueueMalformedRows",
            [
                s("jobqueue_exporter_malformed_rows_total", "0+10x200", field="duration_ms"),
                s("jobqueue_exporter_malformed_rows_total", "0+0.4x200", field="ai_usd"),
                s(done, "0+10x200", job_type="crawl"),
            ],
            fire_at="1h10m",
            value=1,
            labels=lab(field="duration_ms"),
            silent_at=("15m",),
        ),
        Case(
            "JobQueueMalformedRows stays silent when two fields of the same rows are at 4% each",
            "JobQueueMalformedRows",
            [
                s("jobqueue_exporter_malformed_rows_total", "0+0.4x200", field="ai_usd"),
                s("jobqueue_exporter_malformed_rows_total", "0+0.4x200", field="total_usd"),
                s(done, "0+10x200", job_type="crawl"),
            ],
            silent_at=("16m", "30m", "1h30m"),
        ),
        # Counters of two pods (a rollout): summed, so the value is 3 where a max would say 2.
        Case(
            "JobQueueJobsVanished fires a minute after jobs are deleted unseen, summed over two pods",
            "JobQueueJobsVanished",
            [
                s(vanished, "0x20 2x100", last_status="pending"),
                s(vanished, "0x20 1x100", last_status="pending", instance="b"),
                s(vanished, "0x150", last_status="running"),
            ],
            fire_at="11m30s",
            value=3,
            labels=lab(last_status="pending"),
            silent_at=("11m",),
        ),
        Case(
            "JobQueueJobsVanished fires on one job, 50m after, and resolves once the hour is past",
            "JobQueueJobsVanished",
            [s(vanished, "0x20 1x200", last_status="running")],
            fire_at="1h",
            value=1,
            labels=lab(last_status="running"),
            silent_at=("1h20m",),
        ),
        Case(
            "JobQueueJobsVanished stays silent while nothing vanishes",
            "JobQueueJobsVanished",
            [
                s(vanished, "0x150", last_status="pending"),
                s(vanished, "5x150", last_status="running"),
            ],
            silent_at=("30m", "1h10m"),
        ),
        Case(
            "JobQueueMalformedRows stays silent at exactly 5%",
            "JobQueueMalformedRows",
            [
                s("jobqueue_exporter_malformed_rows_total", "0+0.5x200", field="cost"),
                s(done, "0+5x200", job_type="crawl"),
                s(done, "0+5x200", job_type="mail"),
            ],
            silent_at=("30m", "1h30m"),
        ),
        # What the exporter exports for a queue that stores no cost (tests/db/test_no_cost.py):
        # a missing key or a NULL result is absent, so every field's counter stays at 0 ...
        Case(
            "JobQueueMalformedRows stays silent on a queue whose results hold no cost",
            "JobQueueMalformedRows",
            [
                *(
                    s("jobqueue_exporter_malformed_rows_total", "0x200", field=f)
                    for f in ("result", "duration_ms", "ai_usd", "proxy_usd", "total_usd")
                ),
                s(done, "0+5x200", job_type="crawl"),
            ],
            silent_at=("16m", "30m", "1h30m"),
        ),
        # ... and with every collect.*_path null the counter is not exported at all.
        Case(
            "JobQueueMalformedRows stays silent on a queue whose result paths are all null",
            "JobQueueMalformedRows",
            [
                s(done, "0+5x200", job_type="crawl"),
                s("jobqueue_job_duration_seconds_count", "0+5x200", job_type="crawl"),
            ],
            silent_at=("16m", "30m", "1h30m"),
        ),
    ]


def slo_cases() -> list[Case]:
    fail = "jobqueue_job_failures_total"
    done = "jobqueue_jobs_completed_total"
    bucket = "jobqueue_job_wait_seconds_bucket"
    count = "jobqueue_job_wait_seconds_count"
    return [
        Case(
            "JobQueueErrorBudgetBurn pages and tickets at 8% failures (6h and 30m windows)",
            "JobQueueErrorBudgetBurn",
            [
                s(fail, "0+0.8x120", job_type="crawl", reason="error"),
                s(done, "0+9.2x120", job_type="crawl"),
            ],
            fire_at="16m",
            value=8,
            labels=lab(job_type="crawl"),
            silent_at=("1m",),
        ),
        Case(
            "JobQueueErrorBudgetBurn tickets only at 4% failures",
            "JobQueueErrorBudgetBurn",
            [
                s(fail, "0+0.4x120", job_type="crawl", reason="error"),
                s(done, "0+9.6x120", job_type="crawl"),
            ],
            fire_at="16m",
            value=4,
            labels=lab(job_type="crawl"),
            severities=("warning",),
            silent_at=("15m",),
        ),
        Case(
            "JobQueueErrorBudgetBurn stays silent at 0.9% failures and on low volume",
            "JobQueueErrorBudgetBurn",
            [
                # Below 1x: even the 3d/6h ticket stays shut (2.5% sustained opens it).
                s(fail, "0+0.09x300", job_type="crawl", reason="error"),
                s(done, "0+9.91x300", job_type="crawl"),
                s(fail, "0+0.0625x300", job_type="rare", reason="error"),
            ],
            silent_at=("30m", "2h"),
        ),
        Case(
            "JobQueueWaitBudgetBurn pages when a fifth of the jobs wait over 5m",
            "JobQueueWaitBudgetBurn",
            [
                s(bucket, "0+8x120", job_type="crawl", le="300.0"),
                s(bucket, "0+10x120", job_type="crawl", le="+Inf"),
                s(count, "0+10x120", job_type="crawl"),
            ],
            fire_at="3m",
            value=20,
            labels=lab(job_type="crawl"),
            severities=("critical",),
            silent_at=("1m",),
        ),
        Case(
            "JobQueueWaitBudgetBurn stays silent when 0.9% of the jobs wait over 5m",
            "JobQueueWaitBudgetBurn",
            [
                s(bucket, "0+9.91x300", job_type="crawl", le="300.0"),
                s(bucket, "0+9.75x300", job_type="crawl", le="120.0"),
                s(count, "0+10x300", job_type="crawl"),
            ],
            silent_at=("30m", "2h"),
        ),
    ]


def health_cases() -> list[Case]:
    up = "jobqueue_up"
    # Folded now and then, with 3 minutes of failed scrapes: the gap window bridges both.
    folded = "1 0 " * 25 + "stale _x5 " + "1 0 " * 50
    unmapped = "jobqueue_exporter_unmapped_status_rows_total"
    unstamped = "jobqueue_exporter_unstamped_changes_total"
    return [
        Case(
            "JobQueueDatabaseUnreachable fires when both pods report jobqueue_up 0 for 3m",
            "JobQueueDatabaseUnreachable",
            [s(up, "1 0x20"), s(up, "1 0x20", instance="b")],
            fire_at="3m30s",
            value=0,
            labels=lab(),
            silent_at=("3m",),
        ),
        Case(
            "JobQueueDatabaseUnreachable stays silent while one pod collects",
            "JobQueueDatabaseUnreachable",
            [s(up, "0x20"), s(up, "1x20", instance="b")],
            silent_at=("5m", "10m"),
        ),
        Case(
            "JobQueueCollectionErrors fires when half the collections fail",
            "JobQueueCollectionErrors",
            [
                s("jobqueue_exporter_collections_total", "0+1x60"),
                s("jobqueue_exporter_collection_errors_total", "0+0.25x60", reason="connection"),
                s("jobqueue_exporter_collection_errors_total", "0+0.25x60", reason="timeout"),
            ],
            fire_at="5m30s",
            value=0.5,
            labels=lab(),
            silent_at=("5m",),
        ),
        Case(
            "JobQueueCollectionErrors stays silent at exactly a quarter",
            "JobQueueCollectionErrors",
            [
                s("jobqueue_exporter_collections_total", "0+1x60"),
                s("jobqueue_exporter_collection_errors_total", "0+0.25x60", reason="connection"),
                # Both pods collect q3; pod a fails half its collections: a quarter of all.
                s("jobqueue_exporter_collections_total", "0+1x60", queue="q3"),
                s("jobqueue_exporter_collections_total", "0+1x60", queue="q3", instance="b"),
                s(
                    "jobqueue_exporter_collection_errors_total",
                    "0+0.5x60",
                    queue="q3",
                    reason="connection",
                ),
            ],
            silent_at=("10m", "25m"),
        ),
        Case(
            "JobQueueExporterDown fires when every target is down for 5m",
            "JobQueueExporterDown",
            [
                ('up{job="jobqueue-exporter", instance="a"}', "0x20"),
                ('up{job="jobqueue-exporter", instance="b"}', "0x20"),
            ],
            fire_at="5m",
            value=0,
            labels={"job": "jobqueue-exporter"},
            silent_at=("4m30s",),
        ),
        Case(
            "JobQueueExporterDown fires with its static job label when the target is absent",
            "JobQueueExporterDown",
            [('up{job="other", instance="a"}', "1x20")],
            fire_at="5m",
            value=1,
            labels={"job": "jobqueue-exporter"},
            silent_at=("4m30s",),
        ),
        Case(
            "JobQueueExporterDown stays silent while one target is up",
            "JobQueueExporterDown",
            [
                ('up{job="jobqueue-exporter", instance="a"}', "0x20"),
                ('up{job="jobqueue-exporter", instance="b"}', "1x20"),
            ],
            silent_at=("6m", "10m"),
        ),
        Case(
            "JobQueueCollectionSlow fires when collections take 90% of the timeout for 15m",
            "JobQueueCollectionSlow",
            [
                s("jobqueue_exporter_collection_duration_seconds", "9.5 8.5 " * 30),
                s("jobqueue_exporter_collection_timeout_seconds", "10x60"),
            ],
            fire_at="15m",
            value=99.5 / 110,
            labels=lab(),
            silent_at=("14m30s",),
        ),
        Case(
            "JobQueueCollectionSlow stays silent at exactly 80% of the timeout",
            "JobQueueCollectionSlow",
            [
                s("jobqueue_exporter_collection_duration_seconds", "8.5 7 " * 30),
                s("jobqueue_exporter_collection_timeout_seconds", "10x60"),
                s("jobqueue_exporter_collection_duration_seconds", "8x60", instance="b"),
                s("jobqueue_exporter_collection_timeout_seconds", "10x60", instance="b"),
            ],
            silent_at=("20m", "29m"),
        ),
        Case(
            "JobQueueMissingIndex fires after an hour, once for two pods (value 1, not 2)",
            "JobQueueMissingIndex",
            [
                s("jobqueue_exporter_missing_index", "1x150", index="job_exporter_dead_idx"),
                s(
                    "jobqueue_exporter_missing_index",
                    "1x150",
                    index="job_exporter_dead_idx",
                    instance="b",
                ),
            ],
            fire_at="1h",
            value=1,
            labels=lab(index="job_exporter_dead_idx"),
            silent_at=("59m30s",),
        ),
        Case(
            "JobQueueMissingIndex stays silent when the index exists",
            "JobQueueMissingIndex",
            [s("jobqueue_exporter_missing_index", "0x150", index="job_exporter_dead_idx")],
            silent_at=("1h10m",),
        ),
        Case(
            "JobQueueLabelCapReached fires when job types are folded for an hour (two pods: 1)",
            "JobQueueLabelCapReached",
            [
                s("jobqueue_exporter_job_types_folded", folded),
                s("jobqueue_exporter_job_types_folded", folded, instance="b"),
            ],
            fire_at="1h",
            value=1,
            labels=lab(),
            silent_at=("59m30s",),
        ),
        Case(
            "JobQueueLabelCapReached stays silent when nothing is folded",
            "JobQueueLabelCapReached",
            [s("jobqueue_exporter_job_types_folded", "0x150")],
            silent_at=("1h10m",),
        ),
        # A rollout: the new pod reads the next unmapped row; the rows of both pods are summed.
        Case(
            "JobQueueUnmappedStatus fires a minute after changed rows carry an unmapped status",
            "JobQueueUnmappedStatus",
            [
                s(unmapped, "0x20 2x100"),
                s(unmapped, "0x20 1x100", instance="b"),
                s(unmapped, "4x150", queue="q2"),
            ],
            fire_at="11m30s",
            value=3,
            labels=lab(),
            silent_at=("11m",),
        ),
        # A pg_dump of 14 minutes is no news; a transaction that keeps the cap exceeded for 15
        # does (two pods of a rollout both over the cap count once). Samples every 30 s.
        Case(
            "JobQueueHeldJobsCapExceeded fires after 15m over the cap, once for two pods",
            "JobQueueHeldJobsCapExceeded",
            [
                s("jobqueue_exporter_held_cap_exceeded", "0x10 1x60 0x30"),
                s("jobqueue_exporter_held_cap_exceeded", "0x10 1x60 0x30", instance="b"),
                s("jobqueue_exporter_held_cap_exceeded", "1x10 0x90", queue="q2"),
            ],
            fire_at="21m",
            value=1,
            labels=lab(),
            silent_at=("20m", "1h15m"),
        ),
        Case(
            "JobQueueHeldJobsCapExceeded stays silent on a cap exceeded for 14 minutes",
            "JobQueueHeldJobsCapExceeded",
            [s("jobqueue_exporter_held_cap_exceeded", "0x10 1x27 0x80")],
            silent_at=("19m30s", "20m", "30m"),
        ),
        # One row is enough, and it keeps the alert up for the whole hour: a typo that a rare
        # job type hits once an hour must not slip between two windows.
        Case(
            "JobQueueUnmappedStatus fires on one row, 40m after, and resolves once the hour is past",
            "JobQueueUnmappedStatus",
            [s(unmapped, "0x20 1x200")],
            fire_at="1h",
            value=1,
            labels=lab(),
            silent_at=("1h25m",),
        ),
        # The first unstamped completion is found within two intervals; one is proof enough,
        # and the pods of a rollout are summed over every status found.
        Case(
            "JobQueueUnstampedChanges fires a minute after jobs change without a stamp",
            "JobQueueUnstampedChanges",
            [
                s(unstamped, "0x20 4x100", status="done"),
                s(unstamped, "0x20 1x100", status="pending", instance="b"),
                s(unstamped, "0x150", status="dead"),
                s(unstamped, "2x150", status="done", queue="q2"),
            ],
            fire_at="11m30s",
            value=5,
            labels=lab(),
            silent_at=("11m",),
        ),
        Case(
            "JobQueueUnstampedChanges fires on one change and resolves once the hour is past",
            "JobQueueUnstampedChanges",
            [s(unstamped, "0x20 1x200", status="running")],
            fire_at="1h",
            value=1,
            labels=lab(),
            silent_at=("1h25m",),
        ),
        Case(
            "JobQueueUnstampedChanges stays silent while every change is stamped",
            "JobQueueUnstampedChanges",
            [
                *(s(unstamped, "0x200", status=st) for st in ("pending", "running", "done")),
                s(unstamped, "3x200", status="done", queue="q2"),
            ],
            silent_at=("10m", "1h20m"),
            quiet_at=("10m", "1h20m"),
        ),
        Case(
            "JobQueueUnmappedStatus stays silent on a constant count and an hour after the last row",
            "JobQueueUnmappedStatus",
            [s(unmapped, "0x20 1x200"), s(unmapped, "4x200", queue="q2")],
            silent_at=("1h20m",),
            quiet_at=("10m", "1h20m"),
        ),
    ]


def _two_deployments(q1_up: str) -> list[tuple[str, str]]:
    """One scrape job, two exporter deployments: pod a serves q1, pod b serves q2."""
    ns = {"namespace": "team-a"}
    return [
        ('up{job="jobqueue-exporter", namespace="team-a", instance="a"}', "1x20 0x120"),
        ('up{job="jobqueue-exporter", namespace="team-a", instance="b"}', "1x140"),
        s("jobqueue_up", q1_up, **ns),
        s("jobqueue_up", "1x140", queue="q2", instance="b", **ns),
    ]


def metrics_absent_cases() -> list[Case]:
    # Pod a stops being scraped at 10m30s: its up turns 0 and q1's jobqueue_up goes stale.
    dead = _two_deployments("1x20 stale")
    return [
        Case(
            "JobQueueMetricsAbsent fires 5m after the pod of q1 vanishes while q2's pod is up",
            "JobQueueMetricsAbsent",
            dead,
            fire_at="15m30s",
            value=21,  # samples of q1's jobqueue_up in the last hour
            labels=lab(namespace="team-a"),
            silent_at=("15m",),
        ),
        Case(
            "JobQueueMetricsAbsent still fires 45m after the pod vanished (1h window)",
            "JobQueueMetricsAbsent",
            dead,
            fire_at="55m",
            value=21,
            labels=lab(namespace="team-a"),
        ),
        Case(
            "JobQueueMetricsAbsent fires for a queue seen in a single scrape",
            "JobQueueMetricsAbsent",
            _two_deployments("1 stale"),
            fire_at="5m30s",
            value=1,
            labels=lab(namespace="team-a"),
            silent_at=("5m",),
        ),
        # The gap it closes: neither blinding alert sees the dead pod.
        Case(
            "JobQueueExporterDown stays silent when the other deployment of the job is up",
            "JobQueueExporterDown",
            dead,
            silent_at=("16m", "30m"),
        ),
        Case(
            "JobQueueDatabaseUnreachable stays silent when q1 has no jobqueue_up at all",
            "JobQueueDatabaseUnreachable",
            dead,
            silent_at=("16m", "30m"),
        ),
        Case(
            "JobQueueMetricsAbsent stays silent over a rollout and on a database outage",
            "JobQueueMetricsAbsent",
            [
                # q1 moves from pod a to pod c (another instance, same queue) within a minute;
                # q3's exporter reports 0: its database is down, the series is there.
                *_two_deployments("1x20 stale"),
                s("jobqueue_up", "_x21 1x40", instance="c", namespace="team-a"),
                s("jobqueue_up", "1x4 0x60", queue="q3"),
            ],
            silent_at=("16m", "30m"),
        ),
    ]


def new_type_cases() -> list[Case]:
    cost = "jobqueue_cost_usd_total"
    return [
        Case(
            "JobQueueCostNewJobType fires for a new type spending 50 USD per hour",
            "JobQueueCostNewJobType",
            [s(cost, "0+0.41666666666666666x200", job_type="new", component="ai")],
            fire_at="40m",
            value=33.33,
            labels=lab(job_type="new"),
            silent_at=("30m",),
        ),
        Case(
            "JobQueueCostNewJobType stays silent at 19 USD per hour and on a cheap fresh install",
            "JobQueueCostNewJobType",
            [
                s(cost, "0+0.15833333333333333x400", job_type="under", component="ai"),
                s(cost, "0+0.025x400", job_type="cheap", component="ai"),
            ],
            silent_at=("1h30m", "3h"),
        ),
    ]


def recorded_cost_cases() -> list[Case]:
    """The cost alerts on recorded inputs (rates, week-old baselines): each comparison on
    its own boundary, without a week of raw history."""
    spike = ("JobQueueCostSpike", "job_type:jobqueue_cost_usd_per_hour:rate30m",
             "job_type:jobqueue_cost_usd_per_hour:rate5m",
             "job_type:jobqueue_cost_usd:increase1h_seasonal")  # fmt: skip
    _, rate30m, rate5m, seasonal = spike
    near = []
    # (type, seasonal, 30m rate, 5m rate): exactly 3x on 30m, exactly 3x on 5m, an excess of
    # exactly 5 USD/h, and 2x on one rate with the other far above.
    for job_type, base, slow, fast in (
        ("at30m", 4.0, 12.0, 20.0),
        ("at5m", 4.0, 20.0, 12.0),
        ("floor", 2.0, 7.0, 7.0),
        ("twice30m", 10.0, 20.0, 40.0),
        ("twice5m", 10.0, 40.0, 20.0),
    ):
        near += [
            r(seasonal, f"{base!r}x40", job_type=job_type),
            r(rate30m, f"{slow!r}x40", job_type=job_type),
            r(rate5m, f"{fast!r}x40", job_type=job_type),
        ]
    hourly = "job_type:jobqueue_cost_usd:increase1h"
    last_week = "job_type:jobqueue_cost_usd:increase1h_max1d_offset1w"
    return [
        Case(
            "JobQueueCostSpike fires on recorded rates 3.25x the seasonal baseline",
            "JobQueueCostSpike",
            [
                r(seasonal, "4x40", job_type="hot"),
                r(rate30m, "13x40", job_type="hot"),
                r(rate5m, "13x40", job_type="hot"),
            ],
            fire_at="11m",
            value=13,
            labels=lab(job_type="hot"),
            silent_at=("9m30s",),
        ),
        Case(
            "JobQueueCostSpike stays silent on each comparison's boundary (recorded inputs)",
            "JobQueueCostSpike",
            near,
            silent_at=("12m", "19m"),
        ),
        Case(
            "JobQueueCostNewJobType fires when last week's spend was exactly 0",
            "JobQueueCostNewJobType",
            [r(hourly, "50x40", job_type="zero"), r(last_week, "0x40", job_type="zero")],
            fire_at="16m",
            value=50,
            labels=lab(job_type="zero"),
            silent_at=("14m30s",),
        ),
        Case(
            "JobQueueCostNewJobType stays silent at exactly 20 USD per hour",
            "JobQueueCostNewJobType",
            [r(hourly, "20x40", job_type="twenty")],
            silent_at=("16m", "19m"),
        ),
        Case(
            "JobQueueUnitCostAnomaly fires at exactly the 20 jobs an hour it needs",
            "JobQueueUnitCostAnomaly",
            [
                r("job_type:jobqueue_cost_per_job_usd:ratio1h", "3x80", job_type="crawl"),
                r(
                    "job_type:jobqueue_cost_per_job_usd:ratio1h_avg1d_offset1w",
                    "1x80",
                    job_type="crawl",
                ),
                r("job_type:jobqueue_jobs_completed:increase1h", "20x80", job_type="crawl"),
            ],
            fire_at="31m",
            value=3,
            labels=lab(job_type="crawl"),
            silent_at=("29m30s",),
        ),
    ]


def two_pod_counter_cases() -> list[Case]:
    """Counters split over two pods and two reasons: only their sum crosses the threshold."""
    fail = "jobqueue_job_failures_total"
    done = "jobqueue_jobs_completed_total"
    b = {"instance": "b", "pod": "b"}
    return [
        Case(
            "JobQueueHighFailureRatio fires on 21 attempts an hour split over pods and reasons",
            "JobQueueHighFailureRatio",
            [
                s(fail, "0+0.0525x200", job_type="split", reason="error"),
                s(fail, "0+0.0525x200", job_type="split", reason="deadline"),
                s(done, "0+0.035x200", job_type="split"),
                s(done, "0+0.035x200", job_type="split", **b),
            ],
            fire_at="1h30m",
            value=0.6,
            labels=lab(job_type="split"),
        ),
        Case(
            "JobQueueWorkerCrashStorm fires on reclaims split over two pods",
            "JobQueueWorkerCrashStorm",
            [
                s(fail, "0+0.1x80", job_type="split", reason="lease_expired"),
                s(fail, "0+0.1x80", job_type="split", reason="lease_expired", **b),
                s(fail, "0+0.13333333333333333x80", job_type="split", reason="error"),
                s(done, "0+0.16666666666666666x80", job_type="split"),
                s(done, "0+0.16666666666666666x80", job_type="split", **b),
            ],
            fire_at="30m",
            value=0.3,
            labels=lab(job_type="split"),
        ),
        Case(
            "JobQueueWorkerCrashStorm stays silent below a fifth with completions on two pods",
            "JobQueueWorkerCrashStorm",
            [
                s(fail, "0+0.2x80", job_type="two", reason="lease_expired"),
                s(done, "0+0.43333333333333335x80", job_type="two"),
                s(done, "0+0.43333333333333335x80", job_type="two", **b),
            ],
            silent_at=("25m", "35m"),
        ),
    ]


def all_cases() -> list[Case]:
    return [
        *gauge_cases(),
        *progress_cases(),
        *counter_cases(),
        *slo_cases(),
        *health_cases(),
        *metrics_absent_cases(),
        *new_type_cases(),
        *burn_branch_cases(),
        *more_progress_cases(),
        *deadline_step_cases(),
        *recorded_cost_cases(),
        *two_pod_counter_cases(),
        *logical_cases(),
    ]


def r(metric: str, values: str, **labels: str) -> tuple[str, str]:
    """A recorded series (no instance label) of queue q1."""
    base = {"job": "jobqueue-exporter", "queue": "q1", **labels}
    return (
        f"{metric}{{{', '.join(f'{k}={v!r}'.replace(chr(39), chr(34)) for k, v in base.items())}}}",
        values,
    )


def _burns(slo: str, job_type: str, **windows: float) -> list[tuple[str, str]]:
    out = []
    for window in ("5m", "30m", "1h", "2h", "6h", "1d", "3d"):
        value = windows.get("w" + window, 0.0)
        out.append(r(f"slo:jobqueue_{slo}_errors:burn_rate{window}", f"{value!r}x40",
                     job_type=job_type))  # fmt: skip
    return out


def burn_branch_cases() -> list[Case]:
    """Each burn-rate branch alone, fed with recorded burn rates: above, on and half the
    factor, one window of the pair high without the other, and the events floor."""
    out = []
    for slo, alert, events in (
        ("attempt", "JobQueueErrorBudgetBurn", "slo:jobqueue_attempts:increase1h"),
        ("wait", "JobQueueWaitBudgetBurn", "slo:jobqueue_wait_events:increase1h"),
    ):
        for severity, long, short, factor, for_ in (
            ("critical", "1h", "5m", 14.4, "2m"),
            ("critical", "6h", "30m", 6.0, "2m"),
            ("warning", "1d", "2h", 3.0, "15m"),
            ("warning", "3d", "6h", 1.0, "15m"),
        ):
            above = factor * 1.25
            fire = "16m" if for_ == "15m" else "3m"
            out.append(
                Case(
                    f"{alert} {severity} fires on the {long}/{short} pair alone at "
                    f"{above:g}x with exactly the events floor",
                    alert,
                    [
                        *_burns(slo, "hot", **{f"w{long}": above, f"w{short}": above}),
                        r(events, "10x40", job_type="hot"),
                    ],
                    fire_at=fire,
                    value=above,
                    labels=lab(job_type="hot"),
                    severities=(severity,),
                    silent_at=("1m",) if for_ == "15m" else (),
                )
            )
            series = []
            for job_type, windows, count in (
                ("longon", {f"w{long}": factor, f"w{short}": above}, "100"),
                ("shorton", {f"w{long}": above, f"w{short}": factor}, "100"),
                ("longhalf", {f"w{long}": factor * 0.75, f"w{short}": above}, "100"),
                ("shorthalf", {f"w{long}": above, f"w{short}": factor * 0.75}, "100"),
                ("long", {f"w{long}": above, f"w{short}": 0.0}, "100"),
                ("short", {f"w{long}": 0.0, f"w{short}": above}, "100"),
                ("few", {f"w{long}": above, f"w{short}": above}, "7"),
            ):
                series += [
                    *_burns(slo, job_type, **windows),
                    r(events, f"{count}x40", job_type=job_type),
                ]
            out.append(
                Case(
                    f"{alert} {severity} stays silent on the {long}/{short} pair at the "
                    "factor, below it, with one window high, and below the events floor",
                    alert,
                    series,
                    silent_at=("5m", "18m"),
                )
            )
    return out


def more_progress_cases() -> list[Case]:
    ready = "jobqueue_jobs"
    done = "jobqueue_jobs_completed_total"
    return [
        Case(
            "JobQueueNoProgress fires for a single job that waits now and then",
            "JobQueueNoProgress",
            [
                s(ready, "1 0 " * 20, job_type="one", status="pending"),
                s(ready, "0 1 " * 20, job_type="one", status="running"),
                s("jobqueue_stuck_jobs", "0 1 " * 20, job_type="one", reason="lease_expired"),
                s(done, "0x40", job_type="one"),
                s("jobqueue_job_failures_total", "0x40", job_type="one", reason="error"),
            ],
            fire_at="5m",
            value=1,
            labels=lab(job_type="one"),
            silent_at=("4m30s",),
        ),
        Case(
            "JobQueueNoProgress stays silent on one completion or failure in 15m, one valid "
            "lease now and then, and an empty queue",
            "JobQueueNoProgress",
            [
                s(ready, "5x60", job_type="done1", status="pending"),
                s(done, "0x9 1x60", job_type="done1"),
                s(ready, "5x60", job_type="fail1", status="pending"),
                s("jobqueue_job_failures_total", "0x9 1x60", job_type="fail1", reason="error"),
                s(ready, "5x60", job_type="lease1", status="pending"),
                s(ready, "1 0 " * 30, job_type="lease1", status="running"),
                s(ready, "0x60", job_type="empty", status="pending"),
                s(done, "0x60", job_type="empty"),
            ],
            silent_at=("10m", "14m", "18m"),
        ),
        Case(
            "JobQueueHighFailureRatio counts every reason and both pods: exactly half is silent",
            "JobQueueHighFailureRatio",
            [
                s("jobqueue_job_failures_total", "0+1x150", job_type="split", reason="error"),
                s("jobqueue_job_failures_total", "0+1x150", job_type="split", reason="deadline"),
                s(done, "0+2x75 _x75", job_type="split"),
                s(done, "_x75 150+2x75", job_type="split", instance="b", pod="b"),
            ],
            silent_at=("50m", "70m"),
        ),
        Case(
            "JobQueueWorkerCrashStorm counts every reason: exactly a fifth is silent",
            "JobQueueWorkerCrashStorm",
            [
                s("jobqueue_job_failures_total", "0+1x60", job_type="mix", reason="lease_expired"),
                s("jobqueue_job_failures_total", "0+1x60", job_type="mix", reason="error"),
                s(done, "0+3x60", job_type="mix"),
            ],
            silent_at=("10m", "25m"),
        ),
    ]


def deadline_step_cases() -> list[Case]:
    fail = "jobqueue_job_failures_total"
    return [
        Case(
            "JobQueueDeadlineKills: 20 kills at once raise the warning only, for the hour",
            "JobQueueDeadlineKills",
            [s(fail, "0x120 20x80", job_type="burst", reason="deadline")],
            fire_at="1h15m",
            value=20,
            labels=lab(job_type="burst", reason="deadline"),
            severities=("warning",),
        ),
        Case(
            "JobQueueDeadlineKills: exactly 30 kills in the hour raise the warning only",
            "JobQueueDeadlineKills",
            [s(fail, "0x120 30x80", job_type="thirty", reason="deadline")],
            fire_at="1h15m",
            value=30,
            labels=lab(job_type="thirty", reason="deadline"),
            severities=("warning",),
        ),
        Case(
            "JobQueueDeadlineKills stays silent on exactly 5 and on 4 kills at once",
            "JobQueueDeadlineKills",
            [
                s(fail, "0x120 5x80", job_type="five", reason="deadline"),
                s(fail, "0x120 4x80", job_type="four", reason="deadline"),
            ],
            silent_at=("1h15m", "1h25m", "1h35m"),
        ),
    ]
