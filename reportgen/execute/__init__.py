"""Execution: how the combinations of a suite get measured, apart from what measuring is.

``plan``        which combinations of a run are done, claimed, pending; claims as lock files
``record``      the records written under runs/ (combination envelope, run.json)
``fresh``       a measurement in a fresh process (spawned from any interpreter, or forked from
                the fork server): its result, or why it died, timed out or ran out of memory
``forkserver``  CPU workers forked from a process that has imported torch and transformers once
``worker``      the measuring process: one per device, a fresh interpreter (spawned, or on the
                CPU forked from the fork server)
``supervisor``  starts a worker, hands it one combination at a time, survives its death
``job``         what one invocation measures; a unit's outcome written as a round or record
``devices``     which devices get a worker (``--devices``)
``local``       the default executor: one supervised worker per device on this host
``inline``      measuring in this process, without isolation (for the isolation-cost bench)
``slurm``       the Slurm executor (submitit): validates, submits one job array, waits on it
``slurm_task``  one array task on its node: measures what its run directory lacks, writes run.json
``console``     the progress display and the quiet console

The parent never measures: it plans, hands out work and writes what comes back.
"""
