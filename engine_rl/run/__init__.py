"""What makes a run: the run folder and its lock, checkpoints and their atomic writes, the
training state they hold, resume, rank checkpoints and the processes of a data-parallel run, and
the training driver (:func:`engine_rl.run.driver.train`, its stages in :mod:`engine_rl.run.stages`)
that assembles a recipe, the handlers and all of these into ``engine-rl train``.

This package assembles the core and :mod:`handlers`; the core never imports it, except for the
checkpoint modules (:mod:`~engine_rl.run.checkpoint`, :mod:`~engine_rl.run.checkpoint_writes`,
:mod:`~engine_rl.run.state`), which import only the core. Nothing is imported here, so importing
one module of the package does not import the driver (and with it the handlers).
"""
