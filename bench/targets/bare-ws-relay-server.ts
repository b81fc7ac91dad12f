// A bare uWS WebSocket relay, no payment work: each client socket opens one upstream socket with `ws` (as a
// paid session does) and messages go both ways unchanged. The floor a paid session's relay is measured by.
import uws from 'uWebSockets.js'
import UpstreamSocket from 'ws'

const upstream = process.env.UPSTREAM_URL!.replace(/^http/, 'ws')

interface Relay {
  up: UpstreamSocket
  ws: uws.WebSocket<Relay> | null
}

uws
  .App()
  .ws<Relay>('/*', {
    maxPayloadLength: 16 * 1024 * 1024,
    maxBackpressure: 64 * 1024 * 1024,
    idleTimeout: 120,
    upgrade: (res, req, context) => {
      const key = req.getHeader('sec-websocket-key')
      const path = req.getUrl()
      let aborted = false
      res.onAborted(() => {
        aborted = true
      })
      const up = new UpstreamSocket(`${upstream}${path}`, { perMessageDeflate: false })
      up.once('error', () => {
        if (!aborted) res.cork(() => res.writeStatus('502 Bad Gateway').end())
      })
      up.once('open', () => {
        if (aborted) return up.close()
        res.cork(() => res.upgrade<Relay>({ up, ws: null }, key, '', '', context))
      })
    },
    open: (ws) => {
      const relay = ws.getUserData()
      relay.ws = ws
      relay.up.on('message', (data, isBinary) => relay.ws?.send(data as Buffer, isBinary))
      relay.up.on('close', () => relay.ws?.end(1000))
    },
    message: (ws, message, isBinary) => {
      ws.getUserData().up.send(Buffer.copyBytesFrom(new Uint8Array(message)), { binary: isBinary })
    },
    close: (ws) => {
      const relay = ws.getUserData()
      relay.ws = null
      relay.up.close()
    },
  })
  // PORT: relay processes on one port (this uWS build listens with SO_REUSEPORT, so the kernel spreads
  // connections between them, as between tollgate's workers).
  .listen('127.0.0.1', Number(process.env.PORT ?? 0), (socket) => {
    if (!socket) throw new Error(`cannot listen on 127.0.0.1:${process.env.PORT}`)
    process.stdout.write(`${JSON.stringify({ port: uws.us_socket_local_port(socket) })}\n`)
  })
setTimeout(() => process.exit(0), Number(process.env.MAX_MS ?? 600_000)).unref()
process.on('SIGTERM', () => process.exit(0))
