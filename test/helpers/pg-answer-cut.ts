// A TCP proxy in front of a PostgreSQL server that can lose one statement's answer after the server committed
// it: armed, it passes the server's messages until the next CommandComplete, drops that and the rest, and once
// the server says ReadyForQuery (the implicit transaction ended: committed) closes both sides. The client
// sees its connection drop mid-answer: the one fault where a write's outcome is unknown to its writer.

import type { AddressInfo } from 'node:net'
import { createConnection, createServer, type Socket } from 'node:net'

export interface PgAnswerCut {
  /** The target URL with this proxy's host and port. */
  url: string
  /** Cuts the answer of the next statement that completes; resolves once it was cut. */
  cutNextAnswer(): Promise<void>
  close(): Promise<void>
}

const COMMAND_COMPLETE = 0x43 // 'C'
const READY_FOR_QUERY = 0x5a // 'Z'

export async function startPgAnswerCut(targetUrl: string): Promise<PgAnswerCut> {
  const target = new URL(targetUrl)
  let armed: (() => void) | null = null
  const sockets = new Set<Socket>()
  const server = createServer((client) => {
    const upstream = createConnection(Number(target.port || 5432), target.hostname)
    sockets.add(client).add(upstream)
    const end = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    client.on('data', (d) => upstream.write(d))
    client.on('error', end).on('close', end)
    upstream.on('error', end).on('close', end)
    // Read as messages only while armed: arming happens between statements, at a message boundary.
    let held = Buffer.alloc(0)
    let completed = false
    upstream.on('data', (d: Buffer) => {
      if (armed === null) return void client.write(d)
      held = Buffer.concat([held, d])
      while (held.length >= 5) {
        const length = held.readInt32BE(1)
        if (held.length < 1 + length) break
        const message = held.subarray(0, 1 + length)
        held = held.subarray(1 + length)
        if (message[0] === COMMAND_COMPLETE) completed = true
        if (!completed) client.write(message)
        else if (message[0] === READY_FOR_QUERY) {
          const done = armed
          armed = null
          end()
          done()
          return
        }
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const url = new URL(targetUrl)
  url.hostname = '127.0.0.1'
  url.port = String((server.address() as AddressInfo).port)
  return {
    url: url.toString(),
    cutNextAnswer: () => new Promise<void>((resolve) => (armed = resolve)),
    async close() {
      for (const s of sockets) s.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
