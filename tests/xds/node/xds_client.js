// A stock Node.js gRPC client for the xDS tests: @grpc/grpc-js with
// @grpc/grpc-js-xds (pinned in package.json beside this file). It contains
// no Aside code: it dials xds:///NAME with grpc-js alone and finds its
// management server through the bootstrap named by GRPC_XDS_BOOTSTRAP, as
// any current Node service would. The helloworld messages are encoded by
// hand (one string field each), as in xds_client.py.
//
//     node xds_client.js TARGET NAME [PAUSE_MS] [KEY_HEADER=VALUE]
//     node xds_client.js TARGET NAME PAUSE_MS KEY_HEADER=@N
//
// Calls helloworld.Greeter/SayHello (HelloRequest.name = NAME) one call at
// a time (wait_for_ready, 5 s deadline), pausing PAUSE_MS (default 0)
// between calls, until killed; with KEY_HEADER=VALUE every call carries
// that metadata (the route's hash header). With KEY_HEADER=@N the calls
// cycle through the keys key-0 .. key-<N-1>: call i carries
// KEY_HEADER=key-<i mod N> and is made as NAME/key-<i mod N>, so the
// backends' log says where each key went. Writes to stderr, in the
// key=value form the tests read:
//     event=client.started
//     event=calls ok=N failed=M          about once a second, cumulative
//     event=call.failed code=C message=... the first 20 failures
//
// With ASIDE_XDS_USER_AGENT_NAME and/or ASIDE_XDS_USER_AGENT_VERSION set
// (empty included), the client says that in its ADS node instead of what
// grpc-js-xds says ("gRPC Node Pure JS", its package version): the same
// client under another name, to see what a management server sends a
// client it does not know.
'use strict';

const grpc = require('@grpc/grpc-js');
require('@grpc/grpc-js-xds').register();

function overrideUserAgent() {
  const name = process.env.ASIDE_XDS_USER_AGENT_NAME;
  const version = process.env.ASIDE_XDS_USER_AGENT_VERSION;
  if (name === undefined && version === undefined) {
    return;
  }
  const {XdsClient} = require('@grpc/grpc-js-xds/build/src/xds-client');
  const original =
      Object.getOwnPropertyDescriptor(XdsClient.prototype, 'adsNode').get;
  Object.defineProperty(XdsClient.prototype, 'adsNode', {
    get() {
      const node = original.call(this);
      if (node === undefined) {
        return node;
      }
      return {
        ...node,
        user_agent_name: name ?? node.user_agent_name,
        user_agent_version: version ?? node.user_agent_version,
      };
    },
  });
}
overrideUserAgent();

const FAILURES_LOGGED = 20;

function encodeHelloRequest(name) {
  const data = Buffer.from(name, 'utf8');
  if (data.length >= 128) {
    throw new Error('name too long for a one-byte length');
  }
  return Buffer.concat([Buffer.from([0x0a, data.length]), data]);
}

function main(argv) {
  if (argv.length < 2 || argv.length > 4) {
    process.stderr.write(
        'usage: xds_client.js TARGET NAME [PAUSE_MS] [KEY_HEADER=VALUE]\n');
    return 2;
  }
  const [target, name] = argv;
  const pause = argv.length >= 3 ? Number(argv[2]) : 0;
  let header = null;
  let value = null;
  let keys = 0;
  if (argv.length === 4) {
    const eq = argv[3].indexOf('=');
    header = argv[3].slice(0, eq);
    value = argv[3].slice(eq + 1);
    if (value.startsWith('@')) {
      keys = Number(value.slice(1));
      if (!(keys >= 1)) {
        process.stderr.write(`bad key count in ${argv[3]}\n`);
        return 2;
      }
    }
  }
  const client = new grpc.Client(target, grpc.credentials.createInsecure());
  process.stderr.write(`event=client.started target=${target} name=${name}\n`);
  let ok = 0;
  let failed = 0;
  let lastSummary = Date.now();
  let call = 0;
  const callOnce = () => {
    const metadata = new grpc.Metadata();
    let caller = name;
    if (keys > 0) {
      const key = `key-${call % keys}`;
      metadata.set(header, key);
      caller = `${name}/${key}`;
    } else if (header !== null) {
      metadata.set(header, value);
    }
    call += 1;
    const request = encodeHelloRequest(caller);
    client.makeUnaryRequest(
        '/helloworld.Greeter/SayHello', (b) => b, (b) => b, request, metadata,
        {deadline: Date.now() + 5000, waitForReady: true}, (err) => {
          if (err) {
            failed += 1;
            if (failed <= FAILURES_LOGGED) {
              process.stderr.write(`event=call.failed code=${err.code} ` +
                                   `message=${err.details}\n`);
            }
          } else {
            ok += 1;
          }
          const now = Date.now();
          if (now - lastSummary >= 1000) {
            lastSummary = now;
            process.stderr.write(`event=calls ok=${ok} failed=${failed}\n`);
          }
          setTimeout(callOnce, pause);
        });
  };
  callOnce();
  return undefined;
}

const code = main(process.argv.slice(2));
if (code !== undefined) {
  process.exit(code);
}
