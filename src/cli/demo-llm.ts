// npm run demo-llm: a tiny OpenAI-compatible model server on 127.0.0.1 to sell per token in the README's
// usage-pricing example. POST /v1/chat/completions answers `max_tokens` words (default 16), streamed one
// chunk a word with `stream: true`, plain JSON otherwise; its usage counts a word as a token (prompt: the
// words of the messages). Like OpenAI, a stream reports usage only when stream_options.include_usage asks
// for it: in a last chunk with `choices: []`, and `"usage": null` in every chunk before it.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { type Listening, listenLocal, runDemoServer } from './demo-server.ts'
import { isMain } from './is-main.ts'

const USAGE = `usage: npm run demo-llm [-- --port <port>]

  an OpenAI-compatible model server on 127.0.0.1 (model "demo"):
  POST /v1/chat/completions (stream or JSON), GET /v1/models; a word counts as a token

options:
  --port <port>   default: DEMO_LLM_PORT, else 9001
  -h, --help
`

const WORDS = 'tollgate measured this answer on its way to you and charged for the words it carried'.split(
  ' ',
)
const MAX_WORDS = 100_000

interface ChatRequest {
  stream?: unknown
  max_tokens?: unknown
  messages?: unknown
  stream_options?: { include_usage?: unknown }
}

function words(text: string): number {
  return text.split(/\s+/).filter(Boolean).length
}

/** Words in the messages' contents (strings, or OpenAI's content parts with text). */
function promptTokens(messages: unknown): number {
  if (!Array.isArray(messages)) return 0
  let n = 0
  for (const m of messages as Array<{ content?: unknown }>) {
    if (typeof m?.content === 'string') n += words(m.content)
    else if (Array.isArray(m?.content))
      for (const part of m.content as Array<{ text?: unknown }>)
        if (typeof part?.text === 'string') n += words(part.text)
  }
  return n
}

function chat(body: ChatRequest, res: ServerResponse): void {
  const asked = Number(body.max_tokens ?? 16)
  const n = Number.isInteger(asked) && asked > 0 ? Math.min(asked, MAX_WORDS) : 16
  const prompt = promptTokens(body.messages)
  const usage = {
    prompt_tokens: prompt,
    completion_tokens: n,
    total_tokens: prompt + n,
    prompt_tokens_details: { cached_tokens: 0 },
  }
  const id = `chatcmpl-demo${Date.now()}`
  const word = (i: number) => `${WORDS[i % WORDS.length]}${i === n - 1 ? '.' : ' '}`
  if (body.stream !== true) {
    let text = ''
    for (let i = 0; i < n; i++) text += word(i)
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(
      JSON.stringify({
        id,
        object: 'chat.completion',
        model: 'demo',
        choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }],
        usage,
      }),
    )
    return
  }
  const withUsage = body.stream_options?.include_usage === true
  const event = (choices: unknown[], last?: typeof usage) =>
    `data: ${JSON.stringify({
      id,
      object: 'chat.completion.chunk',
      model: 'demo',
      choices,
      ...(withUsage ? { usage: last ?? null } : {}),
    })}\n\n`
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
  // Written in pieces of about 16 KB, as a server flushes a fast stream.
  let out = ''
  for (let i = 0; i < n; i++) {
    out += event([{ index: 0, delta: { content: word(i) }, finish_reason: null }])
    if (out.length > 16_384) {
      res.write(out)
      out = ''
    }
  }
  out += event([{ index: 0, delta: {}, finish_reason: 'stop' }])
  if (withUsage) out += event([], usage)
  res.end(`${out}data: [DONE]\n\n`)
}

function handle(req: IncomingMessage, res: ServerResponse, body: string): void {
  const path = (req.url ?? '/').split('?')[0]
  if (req.method === 'GET' && path === '/v1/models') {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end('{"object":"list","data":[{"id":"demo","object":"model","owned_by":"tollgate-demo"}]}')
    return
  }
  if (req.method === 'POST' && path === '/v1/chat/completions') {
    let parsed: ChatRequest
    try {
      parsed = JSON.parse(body) as ChatRequest
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' })
      res.end('{"error":{"message":"the body is not JSON","type":"invalid_request_error"}}')
      return
    }
    chat(parsed ?? {}, res)
    return
  }
  res.writeHead(404, { 'content-type': 'application/json' })
  res.end('{"error":{"message":"POST /v1/chat/completions or GET /v1/models","type":"not_found"}}')
}

/** Listens on 127.0.0.1:port (0: any free port). */
export function startDemoLlm(port: number): Promise<Listening> {
  const server = createServer((req, res) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (c: string) => {
      body += c
    })
    req.on('end', () => handle(req, res, body))
  })
  return listenLocal(server, port)
}

if (isMain(import.meta.url)) {
  runDemoServer({
    name: 'demo-llm',
    usage: USAGE,
    portEnv: 'DEMO_LLM_PORT',
    defaultPort: 9001,
    start: startDemoLlm,
    where: (port) => `an OpenAI-compatible model at http://127.0.0.1:${port}/v1`,
  })
}
