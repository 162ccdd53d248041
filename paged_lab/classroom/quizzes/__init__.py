"""The end-of-notebook quizzes of the series, one module per notebook: ``nb01`` for
``01_kv_cache_math.ipynb`` ... ``nb08`` for ``08_kv_memory_today.ipynb``.

Each module has one function, ``quiz(...)``: the notebook's quiz cell calls it with the numbers the
notebook computed, and it returns a ``paged_lab.classroom.quiz.Quiz``. The questions, their choices and every
explanation live here, out of the notebook's reading path, so a learner never sees an answer before
picking one; the answer of each number question is computed here, by the package, when the quiz is
built. ``tests/test_quizzes.py`` holds every quiz to the series' rules (docs/architecture.md).
"""

MODULES = {f"{n:02d}": f"paged_lab.classroom.quizzes.nb{n:02d}" for n in range(1, 9)}
