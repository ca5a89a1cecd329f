'use strict';
// An arena client (bench/arena/arena_client.cc) with no Aside code: a plain
// grpc-js 1.14 channel over every backend address with grpc-js's own
// weighted_round_robin (gRFC A58), its weights from the ORCA reports the
// arena's backends send with every reply (endpoint-load-metrics-bin). Same
// flags, same open loop (Poisson arrivals from the run's start in shared
// memory, latency from the intended send time) and the same output file as
// the C++ client. grpc-js comes from tests/xds/node (npm ci there).
//
//   node grpc_js_client.js --index=N --shm=FILE --addresses=a,b,...
//     --rates=r0,r1,... --period_ns=N --warmup_ns=N --duration_ns=N
//     --deadline_ns=N --seed=N --out=FILE
const fs = require('fs');
const path = require('path');
const grpc = require(path.join(__dirname, '..', '..', 'tests', 'xds', 'node',
                               'node_modules', '@grpc', 'grpc-js'));

const METHOD = '/aside.arena.Work/Call';

function flag(name) {
  const prefix = `--${name}=`;
  const a = process.argv.find((x) => x.startsWith(prefix));
  if (a === undefined) {
    process.stderr.write(`grpc_js_client: --${name} missing\n`);
    process.exit(2);
  }
  return a.slice(prefix.length);
}

const index = Number(flag('index'));
const addresses = flag('addresses').split(',');
const rates = flag('rates').split(',').map(Number);
const periodNs = BigInt(flag('period_ns'));
const warmupNs = BigInt(flag('warmup_ns'));
const durationNs = BigInt(flag('duration_ns'));
const deadlineMs = Number(BigInt(flag('deadline_ns')) / 1000000n);
const seed = Number(flag('seed'));
const out = flag('out');
const shm = flag('shm');

// mulberry32: a small seeded generator, so that runs repeat.
let state = (seed * 1000003 + index) >>> 0;
function random() {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}

const client = new grpc.Client(
    'ipv4:' + addresses.join(','), grpc.credentials.createInsecure(), {
      'grpc.service_config': JSON.stringify({
        loadBalancingConfig: [{
          weighted_round_robin: {
            // The arena's steps are short: weights from the first reports.
            blackout_period: '0s',
            weight_update_period: '0.25s',
          },
        }],
      }),
      'grpc.use_local_subchannel_pool': 1,
    });

// Records of the measured calls: intended (ns from the step's measurement
// start), latency (ns, -1 never completed), step, backend, ok.
const records = [];
let outstanding = 0;

function answered(err, response) {
  if (!err) {
    const n = parseInt(response.toString(), 10);
    return Number.isNaN(n) ? -1 : n;
  }
  const m = /sinkhole (\d+)/.exec(err.details || '');
  return m ? Number(m[1]) : -1;
}

function send(intended, record) {
  ++outstanding;
  client.makeUnaryRequest(
      METHOD, (b) => b, (b) => b, Buffer.from('x'), new grpc.Metadata(),
      {deadline: Date.now() + deadlineMs}, (err, response) => {
        if (record) {
          record.latency = process.hrtime.bigint() - intended;
          record.ok = err ? 0 : 1;
          record.backend = answered(err, response);
        }
        --outstanding;
      });
}

function write() {
  const buf = Buffer.alloc(32 + 32 * records.length);
  buf.writeBigUInt64LE(BigInt(records.length), 0);
  buf.writeBigUInt64LE(0n, 8);   // dropped
  buf.writeBigUInt64LE(0n, 16);  // Watch updates: none
  buf.writeBigUInt64LE(0n, 24);  // load reports: none
  records.forEach((r, i) => {
    const o = 32 + 32 * i;
    buf.writeBigInt64LE(r.intended, o);
    buf.writeBigInt64LE(r.latency, o + 8);
    buf.writeInt32LE(r.step, o + 16);
    buf.writeInt32LE(r.backend, o + 20);
    buf.writeInt32LE(r.ok, o + 24);
    buf.writeInt32LE(0, o + 28);
  });
  fs.writeFileSync(out, buf);
  process.stderr.write(`event=arena_client.done index=${index}\n`);
  process.exit(0);
}

function run(start) {
  let step = 0;
  let t = start;  // ns, the last arrival
  const next = () => {
    while (step < rates.length) {
      t += BigInt(Math.round(-Math.log(1 - random()) * 1e9 / rates[step]));
      const to = start + BigInt(step) * periodNs + warmupNs + durationNs;
      if (t < to) {
        return true;
      }
      ++step;
      t = start + BigInt(step) * periodNs;
    }
    return false;
  };
  let more = next();
  const tick = () => {
    const now = process.hrtime.bigint();
    while (more && t <= now) {
      const zero = start + BigInt(step) * periodNs + warmupNs;
      let record = null;
      if (t >= zero) {
        record = {intended: t - zero, latency: -1n, step, backend: -1, ok: 0};
        records.push(record);
      }
      send(t, record);
      more = next();
    }
    if (more) {
      setTimeout(tick, Math.max(0, Number(t - process.hrtime.bigint()) / 1e6));
      return;
    }
    const giveUp = Date.now() + deadlineMs + 3000;
    const drain = () => {
      if (outstanding > 0 && Date.now() < giveUp) {
        setTimeout(drain, 5);
        return;
      }
      write();
    };
    drain();
  };
  tick();
}

client.waitForReady(Date.now() + 20000, (err) => {
  if (err) {
    process.stderr.write(`grpc_js_client ${index}: ${err.message}\n`);
    process.exit(1);
  }
  process.stderr.write(`event=arena_client.ready index=${index}\n`);
  // ArenaShm::run_start_ns is the file's first 8 bytes.
  const fd = fs.openSync(shm, 'r');
  const head = Buffer.alloc(8);
  const giveUp = Date.now() + 120000;
  const wait = () => {
    fs.readSync(fd, head, 0, 8, 0);
    const start = head.readBigInt64LE(0);
    if (start !== 0n) {
      run(start);
      return;
    }
    if (Date.now() > giveUp) {
      process.stderr.write(`grpc_js_client ${index}: no start\n`);
      process.exit(1);
    }
    setTimeout(wait, 1);
  };
  wait();
});
