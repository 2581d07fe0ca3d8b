"""FeS driven by FedML's own runtime: a FedML user's script, in the shape of FedNLP's
`fedavg_main_tc.py`. FedML's cross-silo runtime over the MPI backend moves the messages and
calls every hook; the FeS trainer and aggregator plugins hold the round logic.

    mpirun -np 3 python mpi/fedml_fes_main.py --cf mpi/fedml_fes_main.yaml
    mpirun -np 3 python mpi/fedml_fes_main.py --cf mpi/fedml_fes_main.yaml --set train_args.method=fedfsl

(as root add --allow-run-as-root --oversubscribe). Over FedML's gRPC backend
(comm_args.backend: GRPC, comm_args.grpc_ipconfig_path: FedML's ipconfig CSV), start one
process per rank, all with the same run directory:

    python mpi/fedml_fes_main.py --cf C.yaml --run-dir runs/x --rank 0    # server
    python mpi/fedml_fes_main.py --cf C.yaml --run-dir runs/x --rank 1    # silo 1 (and so on)

Over FedML's MQTT_S3 backend (comm_args.backend: MQTT_S3, comm_args.silo_num, your broker
and bucket in comm_args.customized_training_mqtt_config / customized_training_s3_config)
start ranks 0..silo_num the same way. A stopped run continues with --resume added to every
rank's command line (same --run-dir and config): the server checkpoints every round.
 Rank 0 is the server, ranks 1..N-1 are
silos that play the FeS clients the server's plan gives them. Results land in the run
directory it prints (metrics.csv, summary.json), as for `fedml-fes run`.
"""

import fedml
from fedml import FedMLRunner

from fedml_fes_plugins import fedml_plugin as fes

if __name__ == "__main__":
    args = fes.init()  # fedml.init() on the FeS config, offline
    device = fedml.device.get_device(args)
    dataset, class_num = fes.load_data(args)
    model = fes.create_model(args, dataset)
    trainer = fes.FesTrainer(model, args)
    aggregator = fes.FesAggregator(model, args)
    FedMLRunner(args, device, dataset, model, trainer, aggregator).run()
