// The upstream of the chaos runs: counts every response it serves per proof (the client puts the proof
// in the query, since payment headers are never forwarded). 'ok' answers 200, 'fail' 500 (not counted:
// a 5xx is not a served call), 'hang' never answers (the proxy times out; not counted either); a request
// with `hang=1` in its query hangs whatever the mode.
// POST /v1/chat/completions is an OpenAI-style token stream for the usage-priced calls: `n` (query) content
// events, one every STREAM_GAP_MS so a fault can land mid-stream, then the usage chunk (prompt
// STREAM_PROMPT_TOKENS, completion n) and [DONE]; counted served when its head is sent, streamed when it ended.
import { createServer, type Server, type ServerResponse } from 'node:http'

export type UpstreamMode = 'ok' | 'fail' | 'hang'

export interface CountingUpstream {
  url: string
  /** Proof → times a 2xx was sent for it. */
  served: Map<string, number>
  /** Proof → token streams sent to their end (usage chunk and [DONE] written). */
  streamed: Map<string, number>
  /** Token streams whose head is sent and whose end is not: a fault now lands mid-stream. */
  streaming(): number
  setMode(mode: UpstreamMode): void
  close(): Promise<void>
}

/** The usage chunk's prompt tokens, whatever the request. */
export const STREAM_PROMPT_TOKENS = 100
/** Between two events of a token stream: 40 events last about 1.6 s. */
const STREAM_GAP_MS = 40

export async function startCountingUpstream(): Promise<CountingUpstream> {
  const served = new Map<string, number>()
  const streamed = new Map<string, number>()
  const hanging = new Set<ServerResponse>()
  let streaming = 0
  let mode: UpstreamMode = 'ok'
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x')
    const proof = url.searchParams.get('p') ?? ''
    req.resume()
    // `hang=1`: this request alone is never answered (a call the proxy's head timeout puts in doubt).
    if (mode === 'hang' || url.searchParams.get('hang') === '1') {
      hanging.add(res)
      res.on('close', () => hanging.delete(res))
      return
    }
    if (mode === 'fail') {
      res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":"upstream down"}')
      return
    }
    // Counted when the answer is handed to the socket: tollgate has the status from here on.
    served.set(proof, (served.get(proof) ?? 0) + 1)
    if (url.pathname.endsWith('/chat/completions')) {
      streaming++
      res.once('close', () => streaming--)
      stream(res, Number(url.searchParams.get('n') ?? 10), () =>
        streamed.set(proof, (streamed.get(proof) ?? 0) + 1),
      )
      return
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(`{"proof":"${proof}"}`)
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  const { port } = server.address() as { port: number }
  return {
    url: `http://127.0.0.1:${port}`,
    served,
    streamed,
    streaming: () => streaming,
    setMode(next) {
      mode = next
      if (next !== 'hang') for (const res of hanging) res.destroy()
    },
    async close() {
      for (const res of hanging) res.destroy()
      server.closeAllConnections()
      await new Promise<void>((r) => server.close(() => r()))
    },
  }
}

function stream(res: ServerResponse, events: number, ended: () => void): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
  let i = 0
  const timer = setInterval(() => {
    if (res.destroyed) return clearInterval(timer)
    if (i < events) {
      const delta = { content: `tok${i++} ` }
      res.write(
        `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta }], usage: null })}\n\n`,
      )
      return
    }
    clearInterval(timer)
    const usage = {
      prompt_tokens: STREAM_PROMPT_TOKENS,
      completion_tokens: events,
      total_tokens: STREAM_PROMPT_TOKENS + events,
    }
    res.write(`data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [], usage })}\n\n`)
    res.end('data: [DONE]\n\n', ended)
  }, STREAM_GAP_MS)
}
