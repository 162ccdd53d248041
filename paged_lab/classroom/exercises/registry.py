"""Every exercise of the series, by the name of the function a learner writes: what ``check`` looks
up. Each notebook's module declares its own (``EXERCISES``); this module only gathers them."""

from __future__ import annotations

import paged_lab.classroom.exercises.nb01 as nb01
import paged_lab.classroom.exercises.nb02 as nb02
import paged_lab.classroom.exercises.nb03 as nb03
import paged_lab.classroom.exercises.nb04 as nb04
import paged_lab.classroom.exercises.nb05 as nb05
import paged_lab.classroom.exercises.nb06 as nb06
import paged_lab.classroom.exercises.nb07 as nb07
import paged_lab.classroom.exercises.nb08 as nb08
import paged_lab.classroom.exercises.nb09 as nb09
import paged_lab.classroom.exercises.nb10 as nb10
from paged_lab.classroom.exercises.exercise import Exercise

NOTEBOOKS = (nb01, nb02, nb03, nb04, nb05, nb06, nb07, nb08, nb09, nb10)


def _by_name(notebooks) -> dict[str, Exercise]:
    out: dict[str, Exercise] = {}
    for module in notebooks:
        for ex in module.EXERCISES:
            if ex.name in out:  # an editing mistake; caught on import
                raise RuntimeError(f"exercise {ex.name!r} is declared twice ({module.__name__})")
            out[ex.name] = ex
    return out


EXERCISES: dict[str, Exercise] = _by_name(NOTEBOOKS)
