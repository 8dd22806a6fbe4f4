"""How a run fails for `ExportFailed`: its message and next retry on the step and on the run, no stack.

Read in Dagster 1.13's source (issue 25):
- the STEP_FAILURE error is serialized from the exception that leaves the op
  (`dagster_event_sequence_for_step`), and the run's RUN_FAILURE repeats that same error
  (`DagsterEvent.job_failure` takes the first step failure's);
- an ordinary exception leaves the op wrapped in ``DagsterExecutionStepExecutionError``, whose stack is
  Dagster's own frames. The run page hides that stack on the step's row (error source
  ``USER_CODE_ERROR`` with a cause) but not on the run's row (a run failure has no error source), so
  the run's row showed a stack trace even though `ExportFailed` itself has none;
- a `dg.Failure` is re-raised unwrapped, but serialized from ``sys.exc_info()``: the stack of our
  frames and Dagster's, on both rows (``allow_retries`` and metadata change nothing there);
- the one exception serialized from an error info given to Dagster, as it is, is
  ``DagsterUserCodeProcessError`` (a user-code process's error, already serialized:
  `serializable_error_info_from_exc_info` hoists its single error info). Being a ``DagsterError`` it
  also leaves the op unwrapped.

So `ExportFailed` leaves the op as that error, carrying ``ExportFailed: <message>`` with an empty
stack: the step's row and the run's row read the customer message and the next retry, nothing else.
Every other exception (our bugs) leaves as before, wrapped, with its stack trace on the run page.
"""

from __future__ import annotations

from typing import Final

from dagster._core.errors import DagsterUserCodeProcessError
from dagster._utils.error import SerializableErrorInfo  # type: ignore[attr-defined]  # re-exported from dagster_shared

from seqexport_dagster.errors import ExportFailed

CLASS_NAME: Final = "ExportFailed"


def shown_without_stack(exc: ExportFailed) -> DagsterUserCodeProcessError:
    """The exception to raise from an op for ``exc``: Dagster records ``ExportFailed: <message>``."""
    info = SerializableErrorInfo(message=f"{CLASS_NAME}: {exc}\n", stack=[], cls_name=CLASS_NAME)
    error: DagsterUserCodeProcessError = DagsterUserCodeProcessError(  # type: ignore[no-untyped-call]
        str(exc), user_code_process_error_infos=[info]
    )
    return error
