// An independent msgpack-rpc client (msgpack5rpc) for tests/test_interop.py:
// node lookupd_client.js SOCKET_PATH  ->  prints {"ping", "lookup", "error"} as JSON.
'use strict';
const net = require('net');
const Session = require('msgpack5rpc');

const sock = net.connect(process.argv[2]);
const session = new Session();
session.attach(sock, sock);

function call(method, args) {
  return new Promise((resolve) => session.request(method, args, (err, res) => resolve({err, res})));
}

sock.on('connect', async () => {
  session.notify('nvim_client_info', ['node-test']); // must be ignored by the daemon
  const ping = await call('ping', []);
  const lookup = await call('lookup_offset', ['plain', 0, 100, 'floor']);
  const error = await call('no_such_method', []);
  process.stdout.write(JSON.stringify({ping: ping.res, lookup: lookup.res, error: error.err}) + '\n');
  sock.end();
});
sock.on('error', (e) => { process.stderr.write(String(e) + '\n'); process.exit(2); });
