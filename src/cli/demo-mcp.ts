// npm run demo-mcp: an MCP server of the published @modelcontextprotocol/sdk on 127.0.0.1, Streamable HTTP at
// /mcp, for the README's paid-tools example: `echo` (meant to be free) and `weather` (meant to be priced; its
// forecast is made up). Stateless, as the SDK's stateless example: a server and a transport per POST, answers
// as SSE; GET and DELETE (a session's stream and end) answer 405, which the SDK client expects of such a server.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { z } from 'zod'
import { type Listening, listenLocal, runDemoServer } from './demo-server.ts'
import { isMain } from './is-main.ts'

const USAGE = `usage: npm run demo-mcp [-- --port <port>]

  an MCP server (Streamable HTTP) on http://127.0.0.1:<port>/mcp with two tools:
  echo {text} and weather {city}

options:
  --port <port>   default: DEMO_MCP_PORT, else 9002
  -h, --help
`

/** The same city, the same made-up forecast: the example's output is stable. */
function forecast(city: string): string {
  let h = 0
  for (const c of city.toLowerCase()) h = (h * 31 + c.charCodeAt(0)) >>> 0
  const sky = ['sunny', 'cloudy', 'light rain', 'windy'][h % 4]
  return `${city}: ${sky}, ${12 + (h % 15)} °C`
}

function buildServer(): McpServer {
  const server = new McpServer({ name: 'tollgate-demo-mcp', version: '1.0.0' })
  server.registerTool(
    'echo',
    { description: 'Says back what it is given', inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: 'text', text }] }),
  )
  server.registerTool(
    'weather',
    { description: "Tomorrow's weather in a city (demo data)", inputSchema: { city: z.string() } },
    async ({ city }) => ({ content: [{ type: 'text', text: forecast(city) }] }),
  )
  return server
}

async function handle(req: IncomingMessage, res: ServerResponse, body: string): Promise<void> {
  if ((req.url ?? '').split('?')[0] !== '/mcp') {
    res.writeHead(404, { 'content-type': 'text/plain' }).end('the MCP server is at /mcp\n')
    return
  }
  if (req.method !== 'POST') {
    res.writeHead(405, { 'content-type': 'application/json', allow: 'POST' })
    res.end('{"jsonrpc":"2.0","error":{"code":-32000,"message":"Method not allowed."},"id":null}')
    return
  }
  let message: unknown
  try {
    message = JSON.parse(body)
  } catch {
    res.writeHead(400, { 'content-type': 'application/json' })
    res.end('{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}')
    return
  }
  const server = buildServer()
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined })
  res.on('close', () => {
    void transport.close()
    void server.close()
  })
  await server.connect(transport)
  await transport.handleRequest(req, res, message)
}

/** Listens on 127.0.0.1:port (0: any free port). */
export function startDemoMcp(port: number): Promise<Listening> {
  const http = createServer((req, res) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (c: string) => {
      body += c
    })
    req.on('end', () => {
      handle(req, res, body).catch((err: Error) => {
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' })
        res.end(`${err.message}\n`)
      })
    })
  })
  return listenLocal(http, port)
}

if (isMain(import.meta.url)) {
  runDemoServer({
    name: 'demo-mcp',
    usage: USAGE,
    portEnv: 'DEMO_MCP_PORT',
    defaultPort: 9002,
    start: startDemoMcp,
    where: (port) => `an MCP server at http://127.0.0.1:${port}/mcp`,
  })
}
