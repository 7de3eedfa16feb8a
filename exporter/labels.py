"""Job types as bounded label values: configured names, numbers, untrusted texts cut to length.

No I/O. A job type keeps its first label for the life of the process, under the label cap.
"""

from __future__ import annotations

from exporter.vocabulary import CUT_MARK, MAX_JOB_TYPE_LABEL
from exporter.vocabulary import OTHER as OTHER_LABEL

JobType = int | str  # the job_type column: a number, or the text of a mapped table


def job_type_label(text: str) -> str:
    """A text job type (untrusted) as a label value: itself, or cut to MAX_JOB_TYPE_LABEL."""
    return text if len(text) <= MAX_JOB_TYPE_LABEL else text[: MAX_JOB_TYPE_LABEL - 1] + CUT_MARK


class JobTypeLabels:
    """Maps job types to bounded label values: configured names, else the number (or the text,
    cut to MAX_JOB_TYPE_LABEL), else other.

    A job type keeps the label it was first given for the life of the process, so a counter never
    moves between label sets; once ``cap`` distinct labels exist, new job types fold into "other".
    """

    def __init__(self, names: dict[int, str], cap: int) -> None:
        self._names = dict(names)
        self._cap = cap
        self._assigned: dict[JobType, str] = {}
        self._labels: list[str] = []
        self.folded: set[JobType] = set()
        for job_type in sorted(names):
            self.label(job_type)

    def label(self, job_type: JobType) -> str:
        """Return the label of ``job_type``, assigning one on first sight."""
        found = self._assigned.get(job_type)
        if found is not None:
            return found
        label = self._name(job_type, self._names)  # texts cut alike share a label and a slot
        if label not in self._labels and len(self._labels) >= self._cap:
            label = OTHER_LABEL
            self.folded.add(job_type)
        if label not in self._labels:
            self._labels.append(label)
        self._assigned[job_type] = label
        return label

    @staticmethod
    def _name(job_type: JobType, names: dict[int, str]) -> str:
        if isinstance(job_type, str):
            return job_type_label(job_type)
        return names.get(job_type, str(job_type))

    @property
    def labels(self) -> list[str]:
        """Every label value handed out so far, in order of first sight."""
        return list(self._labels)

    def rename(self, names: dict[int, str], cap: int) -> dict[str, str]:
        """Adopt reloaded names and cap; return old label -> new label for each one that moved.

        A job type with a label of its own takes its new name (two that now share a name share
        a label); one folded into "other" stays there, since its past counts cannot be split
        out. A new cap applies to job types first seen from now on.
        """
        self._names, self._cap = dict(names), cap
        moved: dict[str, str] = {}
        for job_type, old in self._assigned.items():
            new = old if job_type in self.folded else self._name(job_type, names)
            if new != old:
                moved.setdefault(old, new)
                self._assigned[job_type] = new
        self._labels = list(dict.fromkeys(moved.get(label, label) for label in self._labels))
        for job_type in sorted(names):  # configured names are exported before first sight
            self.label(job_type)
        return moved


class PresetJobTypes(JobTypeLabels):
    """Job types a library names by string (task, entrypoint, queue), under the label cap.

    Each name gets a number on first sight, so the snapshot and the view stay keyed as for the
    default schema; its label is the name itself, or "other" beyond the cap.
    """

    def __init__(self, cap: int) -> None:
        super().__init__({}, cap)
        self.numbers: dict[str, int] = {}

    def number(self, name: str) -> int:
        """The number of a job type name, given on first sight (with its label)."""
        found = self.numbers.get(name)
        if found is None:
            found = self.numbers[name] = len(self.numbers) + 1
            self._names[found] = name
            self.label(found)
        return found

    def label_of_name(self, name: str) -> str:
        """The label of a job type name."""
        return self.label(self.number(name))

    def rename(self, names: dict[int, str], cap: int) -> dict[str, str]:
        """Adopt a reloaded cap; collect.job_types names numbers, which a preset has none of."""
        self._cap = cap
        return {}
