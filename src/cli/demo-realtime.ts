// npm run demo-realtime: a small WebSocket server on 127.0.0.1 speaking the OpenAI Realtime event shapes, to
// sell per token in docs/websockets.md's walk-through and to stand behind the session tests. On open it sends
// `session.created`; `session.update` is answered `session.updated`; `conversation.item.create` with input
// text is answered `conversation.item.created` (its words count as input tokens of the next response); a
// `response.create` is answered `response.created`, one delta per word (`response.words`, default 16; a text
// delta, or an audio delta when `response.output_modalities`/`modalities` asks for audio), then
// `response.done` with usage: input (10 + the items' words, of which 2 cached), output one token per word,
// split text/audio. `response.hold`: the deltas come and the done never does. `test.big` is answered with a
// message of `bytes` bytes; any other text is echoed (a relay test's probe). It counts what it sent to each
// connection, by the upgrade's x-request-id: what a session could at most be charged for.
import uws from 'uWebSockets.js'
import { type Listening, runDemoServer } from './demo-server.ts'
import { isMain } from './is-main.ts'

const USAGE = `usage: npm run demo-realtime [-- --port <port>]

  an OpenAI Realtime-shaped WebSocket server on 127.0.0.1 (any path, e.g. ws://127.0.0.1:9003/v1/realtime):
  session.update, conversation.item.create, response.create → response.created, deltas, response.done
  with usage (a word counts as a token)

options:
  --port <port>   default: DEMO_REALTIME_PORT, else 9003
  -h, --help
`

/** The input tokens of every response (its instructions), of which CACHED_TOKENS were cached. */
export const INPUT_TOKENS = 10
export const CACHED_TOKENS = 2
const MAX_WORDS = 100_000
// 20 ms of 24 kHz 16-bit mono silence: one audio delta a word.
const AUDIO_CHUNK = Buffer.alloc(960).toString('base64')

/** What the server sent one connection: the usage it reported and the deltas it streamed. */
export interface SentTally {
  messages: number
  bytes: number
  /** Deltas sent (each counts one output token until its response.done). */
  deltas: number
  /** Deltas of responses whose response.done was sent. */
  reportedDeltas: number
  input_tokens: number
  cached_tokens: number
  output_tokens: number
  responses: number
}

export interface DemoRealtime extends Listening {
  url: string
  /** Headers of each upgrade it accepted. */
  upgrades: Array<Record<string, string>>
  /** Text messages it received. */
  received: string[]
  /** Close codes and reasons the clients sent it. */
  closes: Array<{ code: number; reason: string }>
  /** What it sent, by the upgrade's x-request-id (else `conn_<n>`). */
  sent: Map<string, SentTally>
  /** Connections open now. */
  open(): number
}

interface Conn {
  tally: SentTally
  /** Words of conversation items since the last response. */
  pendingInput: number
}

type Socket = uws.WebSocket<Conn>

interface CreateEvent {
  type?: string
  bytes?: number
  item?: { content?: Array<{ text?: unknown; transcript?: unknown }> }
  response?: { words?: number; hold?: boolean; output_modalities?: string[]; modalities?: string[] }
}

function send(ws: Socket, event: object | string): void {
  const text = typeof event === 'string' ? event : JSON.stringify(event)
  const t = ws.getUserData().tally
  t.messages++
  t.bytes += Buffer.byteLength(text)
  ws.send(text, false)
}

function respond(ws: Socket, r: NonNullable<CreateEvent['response']>): void {
  const conn = ws.getUserData()
  const asked = Number(r.words ?? 16)
  const words = Number.isInteger(asked) && asked >= 0 ? Math.min(asked, MAX_WORDS) : 16
  const audio = (r.output_modalities ?? r.modalities ?? []).includes('audio')
  const id = `resp_${Math.random().toString(36).slice(2)}`
  send(ws, { type: 'response.created', response: { id, object: 'realtime.response', status: 'in_progress' } })
  for (let i = 0; i < words; i++) {
    conn.tally.deltas++
    send(
      ws,
      audio
        ? {
            type: 'response.audio.delta',
            response_id: id,
            output_index: 0,
            content_index: 0,
            delta: AUDIO_CHUNK,
          }
        : {
            type: 'response.text.delta',
            response_id: id,
            output_index: 0,
            content_index: 0,
            delta: `w${i} `,
          },
    )
  }
  if (r.hold === true) return
  const input = INPUT_TOKENS + conn.pendingInput
  conn.pendingInput = 0
  const t = conn.tally
  t.input_tokens += input
  t.cached_tokens += CACHED_TOKENS
  t.output_tokens += words
  t.reportedDeltas = t.deltas
  t.responses++
  send(ws, {
    type: 'response.done',
    response: {
      id,
      object: 'realtime.response',
      status: 'completed',
      usage: {
        total_tokens: input + words,
        input_tokens: input,
        output_tokens: words,
        input_token_details: { cached_tokens: CACHED_TOKENS, text_tokens: input, audio_tokens: 0 },
        output_token_details: { text_tokens: audio ? 0 : words, audio_tokens: audio ? words : 0 },
      },
    },
  })
}

function onText(ws: Socket, text: string): void {
  let event: CreateEvent = {}
  try {
    event = JSON.parse(text)
  } catch {}
  switch (event.type) {
    case 'response.create':
      return respond(ws, event.response ?? {})
    case 'session.update':
      return send(ws, { type: 'session.updated', session: { id: 'sess_demo' } })
    case 'conversation.item.create': {
      let n = 0
      for (const part of event.item?.content ?? []) {
        const s =
          typeof part.text === 'string'
            ? part.text
            : typeof part.transcript === 'string'
              ? part.transcript
              : ''
        n += s.split(/\s+/).filter(Boolean).length
      }
      ws.getUserData().pendingInput += n
      return send(ws, {
        type: 'conversation.item.created',
        item: { id: `item_${Math.random().toString(36).slice(2)}` },
      })
    }
    case 'test.big':
      return send(ws, 'x'.repeat(event.bytes ?? 0))
    default:
      return send(ws, text)
  }
}

const emptyTally = (): SentTally => ({
  messages: 0,
  bytes: 0,
  deltas: 0,
  reportedDeltas: 0,
  input_tokens: 0,
  cached_tokens: 0,
  output_tokens: 0,
  responses: 0,
})

/** Listens on 127.0.0.1:port (0: any free port). */
export async function startDemoRealtime(port: number): Promise<DemoRealtime> {
  const upgrades: Array<Record<string, string>> = []
  const received: string[] = []
  const closes: Array<{ code: number; reason: string }> = []
  const sent = new Map<string, SentTally>()
  let connections = 0
  const sockets = new Set<Socket>()
  const app = uws.App().ws<Conn>('/*', {
    maxPayloadLength: 64 * 1024 * 1024,
    idleTimeout: 0,
    upgrade: (res, req, context) => {
      const headers: Record<string, string> = {}
      req.forEach((k, v) => {
        headers[k] = v
      })
      upgrades.push(headers)
      const tally = emptyTally()
      sent.set(headers['x-request-id'] || `conn_${++connections}`, tally)
      // The first subprotocol the client offered is the one chosen.
      const offered = req.getHeader('sec-websocket-protocol').split(',')[0]?.trim() ?? ''
      res.upgrade<Conn>(
        { tally, pendingInput: 0 },
        req.getHeader('sec-websocket-key'),
        offered,
        req.getHeader('sec-websocket-extensions'),
        context,
      )
    },
    open: (ws) => {
      sockets.add(ws)
      send(ws, { type: 'session.created', session: { id: 'sess_demo', object: 'realtime.session' } })
    },
    message: (ws, message, isBinary) => {
      if (isBinary) return void ws.send(message, true)
      const text = Buffer.from(message).toString('utf8')
      received.push(text)
      onText(ws, text)
    },
    close: (ws, code, message) => {
      sockets.delete(ws)
      closes.push({ code, reason: Buffer.from(message).toString('utf8') })
    },
  })
  const socket = await new Promise<uws.us_listen_socket>((resolve, reject) =>
    app.listen('127.0.0.1', port, (s) =>
      s ? resolve(s) : reject(new Error(`demo-realtime could not listen on 127.0.0.1:${port}`)),
    ),
  )
  const bound = uws.us_socket_local_port(socket)
  return {
    port: bound,
    url: `http://127.0.0.1:${bound}`,
    upgrades,
    received,
    closes,
    sent,
    open: () => sockets.size,
    close: async () => {
      uws.us_listen_socket_close(socket)
      // uWS's App has no close of its own: the sockets still open are cut (as a server going away would).
      for (const ws of [...sockets]) ws.end(1001, 'demo-realtime closing')
    },
  }
}

if (isMain(import.meta.url)) {
  runDemoServer({
    name: 'demo-realtime',
    usage: USAGE,
    portEnv: 'DEMO_REALTIME_PORT',
    defaultPort: 9003,
    start: startDemoRealtime,
    where: (port) => `an OpenAI Realtime-shaped WebSocket server at ws://127.0.0.1:${port}/v1/realtime`,
  })
}
