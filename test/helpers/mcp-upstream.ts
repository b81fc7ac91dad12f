// An unchanged MCP server on loopback, built with the published @modelcontextprotocol/sdk: Streamable HTTP
// (one transport per session, Mcp-Session-Id), answering in SSE or in plain JSON, with three tools: `echo`
// (free), `weather` (a fixed price) and `report` (priced by the bytes of its answer). It counts the calls
// each tool served, so a test can say a paid call ran once and an unpaid one never.
import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { z } from 'zod'

export interface McpUpstream {
  url: string
  /** tools/call served, by tool name. */
  served: Map<string, number>
  /** Mcp-Session-Id headers seen on requests after initialize. */
  sessionsSeen: Set<string>
  /** Every JSON-RPC method the server was sent. */
  methods: string[]
  /** Every JSON-RPC message the server was sent. */
  messages: unknown[]
  close(): Promise<void>
}

/** The `report` tool's text: its size makes its answer's byte count, and so its usage price. */
export const REPORT_TEXT = 'r'.repeat(5_000)

export function buildServer(served: Map<string, number>): McpServer {
  const server = new McpServer({ name: 'tollgate-test-mcp', version: '1.0.0' })
  const count = (name: string) => served.set(name, (served.get(name) ?? 0) + 1)
  server.registerTool(
    'echo',
    { description: 'Says back what it is given (free)', inputSchema: { text: z.string() } },
    async ({ text }) => {
      count('echo')
      return { content: [{ type: 'text', text }] }
    },
  )
  server.registerTool(
    'weather',
    { description: 'The weather in a city (fixed price)', inputSchema: { city: z.string() } },
    async ({ city }) => {
      count('weather')
      return { content: [{ type: 'text', text: `sunny in ${city}` }] }
    },
  )
  server.registerTool(
    'report',
    { description: 'A long report (priced by its bytes)', inputSchema: {} },
    async () => {
      count('report')
      return { content: [{ type: 'text', text: REPORT_TEXT }] }
    },
  )
  // A resource and a prompt (served counted as `resource:<uri>`, `prompt:<name>`).
  server.registerResource('forecast', 'weather://forecast', { description: 'The forecast' }, async (uri) => {
    count('resource:weather://forecast')
    return { contents: [{ uri: uri.href, text: 'sunny all week' }] }
  })
  server.registerResource('about', 'weather://about', { description: 'About (free)' }, async (uri) => {
    count('resource:weather://about')
    return { contents: [{ uri: uri.href, text: 'a weather server' }] }
  })
  server.registerPrompt(
    'plan',
    { description: 'Plan a trip', argsSchema: { city: z.string() } },
    ({ city }) => {
      count('prompt:plan')
      return { messages: [{ role: 'user', content: { type: 'text', text: `plan a trip to ${city}` } }] }
    },
  )
  // MCP 2026-07-28 server/discover, as a server of that revision answers it (this SDK predates it).
  server.server.setRequestHandler(
    z.object({ method: z.literal('server/discover'), params: z.any().optional() }) as never,
    () =>
      ({
        resultType: 'complete',
        supportedVersions: ['2026-07-28'],
        capabilities: { tools: {}, resources: {}, prompts: {} },
      }) as never,
  )
  return server
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = []
  for await (const c of req) chunks.push(c as Buffer)
  if (chunks.length === 0) return undefined
  return JSON.parse(Buffer.concat(chunks).toString('utf8'))
}

/** @param json answer POSTs with plain JSON (enableJsonResponse) instead of an SSE stream. */
export async function startMcpUpstream(options: { json?: boolean } = {}): Promise<McpUpstream> {
  const served = new Map<string, number>()
  const sessionsSeen = new Set<string>()
  const methods: string[] = []
  const messages: unknown[] = []
  const transports = new Map<string, StreamableHTTPServerTransport>()
  const http = createServer((req, res) => {
    void (async () => {
      const body = await readJson(req)
      for (const m of Array.isArray(body) ? body : [body]) {
        messages.push(m)
        if (m && typeof m === 'object' && 'method' in m) methods.push(String(m.method))
      }
      const sid = req.headers['mcp-session-id']
      let transport = typeof sid === 'string' ? transports.get(sid) : undefined
      if (typeof sid === 'string') sessionsSeen.add(sid)
      if (transport === undefined) {
        const t: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          enableJsonResponse: options.json ?? false,
          onsessioninitialized: (id) => {
            transports.set(id, t)
          },
        })
        transport = t
        await buildServer(served).connect(t)
      }
      await transport.handleRequest(req, res, body)
    })().catch((err) => {
      if (!res.headersSent) res.writeHead(500).end(String(err))
    })
  })
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve))
  const { port } = http.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    served,
    sessionsSeen,
    methods,
    messages,
    async close() {
      for (const t of transports.values()) await t.close().catch(() => {})
      http.closeAllConnections()
      await new Promise<void>((resolve) => http.close(() => resolve()))
    },
  }
}
