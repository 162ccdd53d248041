"""Graded exercises: the learner writes a function, ``check`` grades it against the package's own code.

    def slot_for(pos, block_table, block_size):
        ...
    check(slot_for)            # ✓, or the smallest input it gets wrong, expected vs actual, and a hint

``check`` finds the exercise by the function's name (or ``exercise=``), runs the function on a few
fixed cases, then on inputs that hypothesis generates; on a wrong answer hypothesis shrinks the input
to the smallest one that still fails. The expected answer always comes from the real implementation
(``paged_lab.kv_math``, ``memory``, ``sched``, ``kernels.reference``, ``engine``), never from a copy.
The solution is shown only when asked: ``check(fn, show_solution=True)`` or ``solution("slot_for")``
print the package code that does what the exercise asks (the reference solution).

The result renders as coloured HTML in Jupyter and as plain text anywhere else (``print(result)``).
A function that raises, such as the stub's ``NotImplementedError``, is reported in a sentence, not a
traceback. ``make exercises`` (scripts/make_exercises.py) writes the learner copies of the notebooks.

Three things the grader does not let through:
- a function that changes its inputs: the package's answer is computed on a deep copy of the arguments
  made before the learner's call, the learner's function gets another, and an argument it changed fails
  the check with a sentence naming it (an exercise's declared cases are never handed out themselves).
- a function that does not return: each call gets ``time_limit`` seconds (TIME_LIMIT_S by default),
  then it is stopped and the case it was stuck on is reported. The clock is ``signal.setitimer``, whose
  signal interrupts even a pure-Python ``while True:`` loop between two bytecodes and leaves the kernel
  as it was. It works where Jupyter runs a cell, in the main thread of a POSIX kernel; elsewhere (Windows,
  another thread) the calls run without a limit.
- an answer that only claims to be right: ``==`` asks the learner's object too (Python tries its
  ``__eq__`` when the answer's says NotImplemented, and first when it is a subclass), so an object whose
  ``__eq__`` always says True would pass. The answer's type is checked first, element by element, then
  the values are compared.

The package: ``grader.py`` grades (``check``, ``solution``, ``Result``: the time limit, the type
checks, the hypothesis search, the feedback); ``exercise.py`` is the ``Exercise`` record;
``nb01.py`` ... ``nb07.py`` declare each notebook's exercises (reference answer, cases, hint);
``registry.py`` gathers them by name.
"""

from paged_lab.classroom.exercises.exercise import Exercise
from paged_lab.classroom.exercises.grader import Result, check, solution, stub_message
from paged_lab.classroom.exercises.registry import EXERCISES

__all__ = ["EXERCISES", "Exercise", "Result", "check", "solution", "stub_message"]
