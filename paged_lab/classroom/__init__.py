"""What only the notebooks use: quizzes, graded exercises and the glossary.

Nothing in the concept rooms (``kv_math``, ``memory``, ``sched``, ``sim``, ``kernels``, ``engine``,
``models``) nor in ``viz`` imports from here. The words these modules show go through
``paged_lab.viz.i18n``, which sits below them and knows none of them.
"""
