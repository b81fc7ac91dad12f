// A real webhook receiver on 127.0.0.1: records every request's headers and raw body, and answers as the
// test says (a status, extra headers, held until the test lets it go, or hanging until the sender gives up). It can be started on a port
// reserved earlier, so a test can have the port refuse connections first and come up later.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'

export interface Captured {
  headers: Record<string, string>
  /** The raw body exactly as received (what a receiver must verify). */
  body: string
  receivedAt: number
  /** 1-based count of requests this receiver has seen. */
  n: number
}

export type Answer = { status: number; headers?: Record<string, string> } | 'hang'

export interface WebhookReceiver {
  url: string
  port: number
  received: Captured[]
  /** Requests currently being answered (for concurrency checks). */
  active(): number
  maxActive(): number
  /** Resolves with the first captured request matching, waiting up to timeoutMs. */
  waitFor(match: (c: Captured) => boolean, timeoutMs?: number): Promise<Captured>
  close(): Promise<void>
}

export async function startWebhookReceiver(
  options: { port?: number; answer?: (c: Captured, req: IncomingMessage) => Answer | Promise<Answer> } = {},
): Promise<WebhookReceiver> {
  const received: Captured[] = []
  const sockets = new Set<Socket>()
  const waiters = new Set<() => void>()
  let active = 0
  let maxActive = 0
  const answer = options.answer ?? ((): Answer => ({ status: 200 }))

  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    active++
    maxActive = Math.max(maxActive, active)
    let finished = false
    const done = () => {
      if (!finished) {
        finished = true
        active--
      }
    }
    res.on('close', done)
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const headers: Record<string, string> = {}
      for (const [k, val] of Object.entries(req.headers))
        headers[k] = Array.isArray(val) ? val.join(', ') : String(val)
      const captured: Captured = {
        headers,
        body: Buffer.concat(chunks).toString('utf8'),
        receivedAt: Date.now(),
        n: received.length + 1,
      }
      received.push(captured)
      for (const w of waiters) w()
      // A promise holds the answer until it resolves (an attempt kept in flight).
      void Promise.resolve(answer(captured, req)).then((a) => {
        if (a === 'hang') return // the socket is destroyed on close, or the sender times out
        res.writeHead(a.status, { 'content-type': 'text/plain', ...a.headers })
        res.end('ok')
      })
    })
  })
  server.on('connection', (s: Socket) => {
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve())
  })
  const port = (server.address() as AddressInfo).port

  return {
    url: `http://127.0.0.1:${port}`,
    port,
    received,
    active: () => active,
    maxActive: () => maxActive,
    waitFor(match, timeoutMs = 10_000) {
      return new Promise<Captured>((resolve, reject) => {
        const check = () => {
          const hit = received.find(match)
          if (!hit) return false
          clearTimeout(timer)
          waiters.delete(wake)
          resolve(hit)
          return true
        }
        const wake = () => {
          check()
        }
        const timer = setTimeout(() => {
          waiters.delete(wake)
          reject(new Error(`no matching webhook within ${timeoutMs} ms (received ${received.length})`))
        }, timeoutMs)
        if (!check()) waiters.add(wake)
      })
    },
    close() {
      for (const s of sockets) s.destroy()
      return new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
