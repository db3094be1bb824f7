"""What a run will do, decided before anything loads: the script's arguments, the hardware profiles
and ``--config`` layered under the command line, their checks, and the resolved configuration a user
can inspect (``--dry-run``) and the help that describes it.
"""
