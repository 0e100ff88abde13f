"""Course-only code: what the notebooks need and a training script does not.

``import hooklab`` gives the library (hooks, recorders, offloading, clipping); it imports nothing
from here and changes no process-wide setting. The notebooks start with::

    import hooklab
    from hooklab import course
    course.setup()                  # seeds, one thread, print options, PNG figures (process-wide!)
    ...
    course.check("01.1", answer)    # exercise checkers, hints and reference solutions
    course.attempt(lambda: ...)     # show an error or a warning in one stable line

and ``python -m hooklab.course export --lang zh|en`` writes one-language copies of them.
"""
from .attempt import attempt
from .env import setup
from .exercises import check, hint, solution
from .export import export_notebook, export_notebooks
from .lang import course_language

__all__ = ["attempt", "check", "course_language", "export_notebook", "export_notebooks", "hint", "setup", "solution"]
