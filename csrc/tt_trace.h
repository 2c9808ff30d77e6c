/* Internal hooks of the trace module (csrc/trace.c) for submit.c, session.c and tensor.c.
 *
 * Everything here costs one predictable branch when tracing, priority plans and affinity
 * are all off: submit.c tests tt_submit_hooks_on before calling tt_trace_on_submit.
 * The trace module owns the `user_data` field of data handles it has seen while recording
 * (per-handle last writer / readers, for the task DAG); nothing else in tiletrain uses it. */
#ifndef TT_TRACE_H
#define TT_TRACE_H

#include <starpu.h>

/* nonzero when a submission must go through tt_trace_on_submit */
extern int tt_submit_hooks_on;

/* called by tt_submit after the task is filled in, before starpu_task_submit: sets the
 * planned priority and the affinity mask, records the task and its predecessors */
void tt_trace_on_submit(struct starpu_task *task, int kernel);
/* starpu_task_submit failed after tt_trace_on_submit: mark the record */
void tt_trace_on_submit_failed(struct starpu_task *task);

/* session.c: after starpu_init (profiling: whether StarPU profiling is on, and so whether
 * recording starts), and before the tensors are killed at shutdown */
void tt_trace_session_begin(int profiling);
void tt_trace_session_end(void);

/* tensor.c: these tile handles are about to be unregistered */
int tt_trace_tracks_handles(void); /* per-handle DAG state is kept (a recording session) */
void tt_trace_forget_handle(starpu_data_handle_t h); /* a registered handle being freed */

/* sched registry (csrc/sched/registry.c): NULL if `name` is not one of tiletrain's policies */
struct starpu_sched_policy *tt_sched_find(const char *name);

#endif
