// demo-realtime: a small WebSocket server on 127.0.0.1 speaking the OpenAI Realtime event shapes. On open it
// sends `session.created`; a `response.create` is answered with `response.created`, one `response.text.delta`
// per word (response.words, default 16), then `response.done` with usage (input 10 of which 2 cached, output
// one token per word). response.hold: the deltas come and the done never does. `test.big` is answered with
// a message of `bytes` bytes. Any other text is echoed.
import uws from 'uWebSockets.js'

export interface RealtimeUpstream {
  url: string
  /** Headers of each upgrade it accepted, and the subprotocol the client offered. */
  upgrades: Array<Record<string, string>>
  /** Text messages it received. */
  received: string[]
  /** Close codes and reasons the clients sent it. */
  closes: Array<{ code: number; reason: string }>
  close(): Promise<void>
}

export const INPUT_TOKENS = 10
export const CACHED_TOKENS = 2

type Socket = uws.WebSocket<{ n: number }>

function respond(ws: Socket, words: number, hold: boolean): void {
  const id = `resp_${Math.random().toString(36).slice(2)}`
  ws.send(JSON.stringify({ type: 'response.created', response: { id, status: 'in_progress' } }))
  for (let i = 0; i < words; i++)
    ws.send(JSON.stringify({ type: 'response.text.delta', response_id: id, delta: `w${i} ` }))
  if (hold) return
  ws.send(
    JSON.stringify({
      type: 'response.done',
      response: {
        id,
        status: 'completed',
        usage: {
          total_tokens: INPUT_TOKENS + words,
          input_tokens: INPUT_TOKENS,
          output_tokens: words,
          input_token_details: { cached_tokens: CACHED_TOKENS, text_tokens: INPUT_TOKENS, audio_tokens: 0 },
          output_token_details: { text_tokens: words, audio_tokens: 0 },
        },
      },
    }),
  )
}

export async function startRealtimeUpstream(): Promise<RealtimeUpstream> {
  const upgrades: Array<Record<string, string>> = []
  const received: string[] = []
  const closes: Array<{ code: number; reason: string }> = []
  const app = uws.App().ws<{ n: number }>('/*', {
    maxPayloadLength: 64 * 1024 * 1024,
    upgrade: (res, req, context) => {
      const headers: Record<string, string> = {}
      req.forEach((k, v) => {
        headers[k] = v
      })
      upgrades.push(headers)
      const offered = req.getHeader('sec-websocket-protocol').split(',')[0]?.trim() ?? ''
      res.upgrade(
        { n: 0 },
        req.getHeader('sec-websocket-key'),
        offered,
        req.getHeader('sec-websocket-extensions'),
        context,
      )
    },
    open: (ws) => {
      ws.send(JSON.stringify({ type: 'session.created', session: { id: 'sess_demo' } }))
    },
    message: (ws, message, isBinary) => {
      if (isBinary) return void ws.send(message, true)
      const text = Buffer.from(message).toString('utf8')
      received.push(text)
      let event: { type?: string; response?: { words?: number; hold?: boolean } } = {}
      try {
        event = JSON.parse(text)
      } catch {}
      if (event.type === 'response.create')
        return respond(ws, event.response?.words ?? 16, event.response?.hold === true)
      // A test's oversize message from the upstream side: `{"type":"test.big","bytes":n}`.
      if (event.type === 'test.big') return void ws.send('x'.repeat((event as { bytes?: number }).bytes ?? 0))
      ws.send(text)
    },
    close: (_ws, code, message) => {
      closes.push({ code, reason: Buffer.from(message).toString('utf8') })
    },
  })
  const socket = await new Promise<uws.us_listen_socket>((resolve, reject) =>
    app.listen('127.0.0.1', 0, (s) => (s ? resolve(s) : reject(new Error('demo-realtime did not listen')))),
  )
  const port = uws.us_socket_local_port(socket)
  return {
    url: `http://127.0.0.1:${port}`,
    upgrades,
    received,
    closes,
    close: async () => {
      uws.us_listen_socket_close(socket)
    },
  }
}
