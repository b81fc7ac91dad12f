// A bare uWS app answering every request with the same static 402 tollgate sends (status, headers and body
// given by the bench in BARE_402_FILE): the floor of what the challenge path can cost on this machine.

import uws from 'uWebSockets.js'
import { readFileSync } from 'node:fs'

const reply = JSON.parse(readFileSync(process.env.BARE_402_FILE!, 'utf8')) as {
  headers: Array<[string, string]>
  body: string
}
const body = Buffer.from(reply.body)
uws
  .App()
  .any('/*', (res) => {
    res.cork(() => {
      res.writeStatus('402 Payment Required')
      for (const [k, v] of reply.headers) res.writeHeader(k, v)
      res.end(body)
    })
  })
  .listen('127.0.0.1', 0, (socket) => {
    process.stdout.write(`${JSON.stringify({ port: uws.us_socket_local_port(socket) })}\n`)
  })
setTimeout(() => process.exit(0), Number(process.env.MAX_MS ?? 600_000)).unref()
process.on('SIGTERM', () => process.exit(0))
