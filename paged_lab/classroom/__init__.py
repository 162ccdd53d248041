"""What only the notebooks use: quizzes, graded exercises, the glossary, and the zh-TW translation.

Nothing in the concept rooms (``kv_math``, ``memory``, ``sched``, ``sim``, ``kernels``, ``engine``,
``models``) imports from here; ``tests/test_package.py`` checks it.
"""
