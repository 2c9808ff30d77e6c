# Sourced by examples/mpirun_*.sh: the environment and the mpirun launch for NP ranks sharing
# one machine's cores.  Usage: `. examples/mpirun_env.sh; tt_mpirun -m tiletrain ...`.
PY=${PY:-.venv/bin/python}
NP=${NP:-2}        # ranks (more ranks than cores needs --oversubscribe, below)

# One CPU worker per rank: the ranks share the machine's cores (2 here).
export STARPU_NCPU=${STARPU_NCPU:-1}
# Do not pin workers to cores: by default every rank's workers land on the same core.
export STARPU_WORKERS_NOBIND=1
# Do not reserve a core for StarPU-MPI's progress thread either (same reason).
export STARPU_MPI_NOBIND=1
# Single-threaded BLAS inside the workers (numpy's own OpenBLAS too).
export OPENBLAS_NUM_THREADS=1
# StarPU's banner and warnings off (one copy per rank otherwise).
export STARPU_SILENT=1
# Idle workers nap 200 us at a time instead of polling: a polling worker takes a core
# from the other ranks' threads.
export TILETRAIN_IDLE_NAP_US=${TILETRAIN_IDLE_NAP_US:-200}

# --allow-run-as-root: Open MPI refuses to start as root without it (containers).
# --oversubscribe:     allow more ranks than cores (needed for NP=3 or 4 on 2 cores).
# --bind-to none:      let the OS place the ranks (StarPU binds nothing with the variables above).
# -np $NP:             the ranks; tiletrain switches MPI mode on by itself under mpirun.
# -x VAR:              forward these variables to every rank (Open MPI forwards the
#                      environment of local ranks anyway; on a cluster -x is needed).
tt_mpirun() {
    exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$NP" \
        -x STARPU_NCPU -x STARPU_WORKERS_NOBIND -x STARPU_MPI_NOBIND -x OPENBLAS_NUM_THREADS -x STARPU_SILENT -x TILETRAIN_IDLE_NAP_US \
        "$PY" "$@"
}
