"""FeS's message types and keys on FedML's `Message`, defined once for every runtime that moves
them (the MPI managers, the cross-silo server and silos). FedML's own keys (the model params)
are FedML's constants."""

from __future__ import annotations

MSG_C2S_JOIN = "fes_c2s_join"  # cross-silo: a silo announces itself (rank, session, fingerprint, state)
MSG_S2C_WELCOME = "fes_s2c_welcome"
MSG_S2C_TASKS = "fes_s2c_tasks"  # a phase's tasks for this process, with the global tensors
MSG_C2S_UPDATES = "fes_c2s_updates"  # the played clients' updates (or an error)
MSG_C2S_ERROR = "fes_c2s_error"  # MPI: a worker that failed says so before the server aborts
MSG_S2C_FINISH = "fes_s2c_finish"

KEY_RANK = "fes_rank"
KEY_FINGERPRINT = "fes_fingerprint"
KEY_SESSION = "fes_session"  # one per silo process: tells a restart from a join retry
KEY_STATE = "fes_state"  # {str(client_id): pseudo labels stored}
# in a WELCOME while the server starts: the round its run continues after (-1: a fresh run);
# the silo makes its devices' folders what they were at the end of that round
KEY_START_AFTER = "fes_start_after"
KEY_ROUND = "fes_round"
KEY_PHASE = "fes_phase"
KEY_TASKS = "fes_tasks"
KEY_UPDATES = "fes_updates"
KEY_ERROR = "fes_error"
KEY_CLIENT = "fes_client"  # MSG_C2S_ERROR: the client id the failed rank was playing (absent: none yet)
KEY_STATUS = "fes_status"
