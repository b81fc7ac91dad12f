// A paid WebSocket session's client side with the `ws` package: the messages it got (text), the 101's
// headers, and its close.
import { request } from 'node:http'
import WebSocket from 'ws'

export interface WsSession {
  ws: WebSocket
  messages: string[]
  /** The 101's headers (receipt, request id). */
  headers: Record<string, string | string[] | undefined>
  closed: Promise<{ code: number; reason: string }>
  /** The in-band messages of the x402 WebSocket transport shape (`error.code` 402 or a `result`). */
  payment(): Array<{
    id?: unknown
    error?: { code: number; message: string; paymentRequired: any }
    result?: any
    paymentResponse?: any
    metadata?: any
  }>
  /** Messages that name `type` (Realtime events). */
  count(type: string): number
}

export function openWs(
  url: string,
  headers: Record<string, string>,
  protocols: string[] = [],
): Promise<WsSession> {
  const ws = new WebSocket(url.replace(/^http/, 'ws'), protocols, { headers, perMessageDeflate: false })
  const messages: string[] = []
  let upgradeHeaders: WsSession['headers'] = {}
  ws.on('upgrade', (res) => {
    upgradeHeaders = res.headers
  })
  ws.on('message', (data, isBinary) => {
    if (!isBinary) messages.push(data.toString())
  })
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })),
  )
  return new Promise((resolve, reject) => {
    ws.on('open', () =>
      resolve({
        ws,
        messages,
        headers: upgradeHeaders,
        closed,
        payment: () =>
          messages
            .filter((m) => m.startsWith('{"id"') || m.startsWith('{"error"'))
            .map((m) => JSON.parse(m))
            .filter((m) => m.error?.code === 402 || m.result !== undefined),
        count: (type) => messages.filter((m) => m.includes(`"type":"${type}"`)).length,
      }),
    )
    ws.on('unexpected-response', (_req, res) =>
      reject(new Error(`the WebSocket did not open: ${res.statusCode}`)),
    )
    ws.on('error', reject)
  })
}

/** An upgrade request by hand: the HTTP answer a refused upgrade gets. */
export function upgradeAnswer(url: string, headers: Record<string, string> = {}) {
  return new Promise<{ status: number; body: string; headers: Record<string, unknown> }>(
    (resolve, reject) => {
      const req = request(url, {
        headers: {
          connection: 'Upgrade',
          upgrade: 'websocket',
          'sec-websocket-version': '13',
          'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
          ...headers,
        },
      })
      req.on('response', (res) => {
        let body = ''
        res.on('data', (c) => {
          body += c
        })
        res.on('end', () => resolve({ status: res.statusCode!, body, headers: res.headers }))
      })
      req.on('upgrade', (_res, socket) => {
        socket.destroy()
        reject(new Error('upgraded'))
      })
      req.on('error', reject)
      req.end()
    },
  )
}
