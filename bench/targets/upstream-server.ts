// The benchmark's upstream: a plain node:http server answering JSON bodies of a fixed size (/data ~80 B,
// /1k, /256k), in its own process so it never shares an event loop with the proxy or the load generator.
// Prints its port, exits after MAX_MS.
import { createServer } from 'node:http'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { z } from 'zod'

const small = Buffer.from(JSON.stringify({ ok: true, data: 'x'.repeat(64) }))
const sized = (bytes: number) => Buffer.from(JSON.stringify({ data: 'x'.repeat(bytes - 11) }))
const bodies: Record<string, Buffer> = { '/data': small, '/1k': sized(1024), '/256k': sized(256 * 1024) }
// An OpenAI-style chat stream: 50 chunk events, then the usage chunk when the request asked for it.
const SSE_EVENTS = 50
const chunk = (usageNull: boolean) =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'tok ' } }], ...(usageNull ? { usage: null } : {}) })}\n\n`
const sseAsked = Buffer.from(chunk(true).repeat(SSE_EVENTS))
const ssePlain = Buffer.from(chunk(false).repeat(SSE_EVENTS))
const sseUsage = Buffer.from(
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 1200, completion_tokens: 50, prompt_tokens_details: { cached_tokens: 200 } } })}\n\n`,
)
const sseDone = Buffer.from('data: [DONE]\n\n')

function chatStream(req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) {
  const parts: Buffer[] = []
  req.on('data', (c: Buffer) => parts.push(c))
  req.on('end', () => {
    const asked = Buffer.concat(parts).includes('"include_usage":true')
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    // Written in two halves, as a model streams: the events cross write boundaries.
    const events = asked ? sseAsked : ssePlain
    res.write(events.subarray(0, events.length >> 1))
    res.write(events.subarray(events.length >> 1))
    if (asked) res.write(sseUsage)
    res.end(sseDone)
  })
}

/**
 * An MCP server of the published SDK, stateless (a server and transport per request, as the SDK's stateless
 * example does), answering JSON: one tool, `weather`.
 */
function mcp(req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) {
  const parts: Buffer[] = []
  req.on('data', (c: Buffer) => parts.push(c))
  req.on('end', async () => {
    const server = new McpServer({ name: 'bench-mcp', version: '1.0.0' })
    server.registerTool('weather', { inputSchema: { city: z.string() } }, async ({ city }) => ({
      content: [{ type: 'text', text: `sunny in ${city}` }],
    }))
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    })
    res.on('close', () => {
      void transport.close()
      void server.close()
    })
    await server.connect(transport)
    await transport.handleRequest(req, res, JSON.parse(Buffer.concat(parts).toString('utf8')))
  })
}

const server = createServer((req, res) => {
  if (req.url === '/v1/chat/completions') return chatStream(req, res)
  if (req.url === '/mcp') return mcp(req, res)
  const body = bodies[(req.url ?? '').split('?')[0]!] ?? small
  req.resume()
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length })
    res.end(body)
  })
})
server.keepAliveTimeout = 65_000
server.listen(0, '127.0.0.1', () => {
  const address = server.address()
  process.stdout.write(
    `${JSON.stringify({ port: typeof address === 'object' && address ? address.port : 0 })}\n`,
  )
})
const maxMs = Number(process.env.MAX_MS ?? 600_000)
setTimeout(() => process.exit(0), maxMs).unref()
process.on('SIGTERM', () => process.exit(0))
