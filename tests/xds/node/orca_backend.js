// A stock Node.js gRPC backend that publishes its load over out-of-band ORCA
// with grpc-js's own ServerMetricRecorder (no Aside code), for the ORCA
// tests: what a current Node service does to report its load.
//
//     node orca_backend.js QPS CPU [STEP_QPS STEP_CPU]
//
// Listens on 127.0.0.1 (a port of its choosing), serves
// xds.service.orca.v3.OpenRcaService reporting QPS and CPU utilisation, and
// writes to stderr
//     event=backend.started port=N
// On SIGUSR1 it reports STEP_QPS and STEP_CPU from then on (a load step),
// on the next SIGUSR1 QPS and CPU again, and so on, each answered with
// "event=metrics.set ...". It counts the ORCA streams opened
// to it and writes "event=orca.stream streams=N" for each.
'use strict';

const grpc = require('@grpc/grpc-js');

function apply(recorder, qps, cpu) {
  recorder.setQpsMetric(Number(qps));
  recorder.setCpuUtilizationMetric(Number(cpu));
  process.stderr.write(`event=metrics.set qps=${qps} cpu=${cpu}\n`);
}

function main(argv) {
  if (argv.length !== 2 && argv.length !== 4) {
    process.stderr.write('usage: orca_backend.js QPS CPU [STEP_QPS STEP_CPU]\n');
    process.exit(2);
  }
  const recorder = new grpc.ServerMetricRecorder();
  apply(recorder, argv[0], argv[1]);
  if (argv.length === 4) {
    let stepped = false;
    process.on('SIGUSR1', () => {
      stepped = !stepped;
      apply(recorder, argv[stepped ? 2 : 0], argv[stepped ? 3 : 1]);
    });
  }
  const server = new grpc.Server();
  recorder.addToServer(server);
  // Count the streams: wrap the recorder's handler.
  let streams = 0;
  const handlers = server.handlers;
  for (const [path, handler] of handlers) {
    if (path.endsWith('/StreamCoreMetrics')) {
      const serve = handler.func;
      handler.func = (call) => {
        streams += 1;
        process.stderr.write(`event=orca.stream streams=${streams}\n`);
        serve(call);
      };
    }
  }
  server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(),
                   (error, port) => {
                     if (error) {
                       process.stderr.write(`event=bind.failed ${error}\n`);
                       process.exit(1);
                     }
                     process.stderr.write(`event=backend.started port=${port}\n`);
                   });
}

main(process.argv.slice(2));
