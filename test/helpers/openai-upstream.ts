// An OpenAI-compatible upstream on 127.0.0.1 (port 0): POST /v1/chat/completions streams `events` chunks as
// server-sent events and, when the request asked (stream_options.include_usage), a final usage chunk; or
// answers plain JSON with its usage. The request's `model` picks a behaviour the tests need: `no-usage`,
// `malformed-usage`, `huge-usage`, `fail` (503), `slow` (an event every 20 ms). /v1/messages answers
// Anthropic-shaped SSE (usage in message_start and message_delta).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface OpenAiUpstream {
  url: string
  /** Request bodies received, parsed. */
  bodies: Array<Record<string, unknown>>
  /** Streams that ended because the client (tollgate) went away. */
  closedEarly(): number
  close(): Promise<void>
}

export const USAGE = { prompt_tokens: 1200, completion_tokens: 50, cached_tokens: 200 }

export async function startOpenAiUpstream(
  options: {
    events?: number /** Every answer starts this late (an upstream that thinks). */
    delayMs?: number
  } = {},
): Promise<OpenAiUpstream> {
  const events = options.events ?? 50
  const delayMs = options.delayMs ?? 0
  const bodies: Array<Record<string, unknown>> = []
  let closedEarly = 0
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      let body: Record<string, unknown> = {}
      try {
        body = JSON.parse(Buffer.concat(chunks).toString() || '{}')
      } catch {}
      bodies.push(body)
      res.on('close', () => {
        if (!res.writableFinished) closedEarly++
      })
      const go = () => {
        if (req.url?.startsWith('/v1/messages')) return anthropic(res, events)
        answer(req, res, body, events)
      }
      if (delayMs > 0) setTimeout(go, delayMs)
      else go()
    })
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    bodies,
    closedEarly: () => closedEarly,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections()
        server.close(() => r())
      }),
  }
}

function usageFor(model: unknown): unknown {
  if (model === 'malformed-usage') return { prompt_tokens: 'many', completion_tokens: -1 }
  if (model === 'huge-usage') return { prompt_tokens: 90_000_000, completion_tokens: 9_000_000 }
  return {
    prompt_tokens: USAGE.prompt_tokens,
    completion_tokens: USAGE.completion_tokens,
    total_tokens: USAGE.prompt_tokens + USAGE.completion_tokens,
    prompt_tokens_details: { cached_tokens: USAGE.cached_tokens },
  }
}

function answer(_req: IncomingMessage, res: ServerResponse, body: Record<string, unknown>, events: number) {
  const model = body.model
  if (model === 'fail') {
    res.writeHead(503, { 'content-type': 'application/json' })
    res.end('{"error":"overloaded"}')
    return
  }
  if (body.stream !== true) {
    const usage = model === 'no-usage' ? undefined : usageFor(model)
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(
      JSON.stringify({
        id: 'chatcmpl-1',
        object: 'chat.completion',
        // max_tokens sets the answer's length (tests that need answers of different sizes).
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: 'hello '.repeat(Number(body.max_tokens ?? events)) },
          },
        ],
        ...(usage === undefined ? {} : { usage }),
      }),
    )
    return
  }
  const asked = (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
  const chunk = (i: number) =>
    `data: ${JSON.stringify({
      id: 'chatcmpl-1',
      object: 'chat.completion.chunk',
      choices: [{ index: 0, delta: { content: `tok${i} ` }, finish_reason: null }],
      ...(asked ? { usage: null } : {}),
    })}\n\n`
  const finish = () => {
    if (asked && model !== 'no-usage') {
      res.write(
        `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', choices: [], usage: usageFor(model) })}\n\n`,
      )
    }
    res.end('data: [DONE]\n\n')
  }
  if (model === 'slow') {
    let i = 0
    const timer = setInterval(() => {
      if (res.destroyed) return clearInterval(timer)
      res.write(chunk(i++))
      if (i === events) {
        clearInterval(timer)
        finish()
      }
    }, 20)
    return
  }
  // Several events per write, as a real server flushes them: events cross chunk boundaries.
  let out = ''
  for (let i = 0; i < events; i++) {
    out += chunk(i)
    if (out.length > 700) {
      res.write(out.slice(0, 500))
      out = out.slice(500)
    }
  }
  res.write(out)
  finish()
}

function anthropic(res: ServerResponse, events: number) {
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  const send = (event: string, data: unknown) =>
    res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`)
  send('message_start', {
    type: 'message_start',
    message: { id: 'msg_1', usage: { input_tokens: 1000, cache_read_input_tokens: 200, output_tokens: 1 } },
  })
  for (let i = 0; i < events; i++)
    send('content_block_delta', {
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'text_delta', text: 'x' },
    })
  send('message_delta', {
    type: 'message_delta',
    delta: { stop_reason: 'end_turn' },
    usage: { output_tokens: 50 },
  })
  send('message_stop', { type: 'message_stop' })
  res.end()
}
