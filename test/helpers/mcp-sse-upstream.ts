// An unchanged MCP server on the legacy HTTP+SSE transport (protocol 2024-11-05), built with the published
// @modelcontextprotocol/sdk's SSEServerTransport: GET <prefix>/sse opens a session's event stream (its first
// event names <prefix>/messages?sessionId=…), POST there answers 202 and the answer goes on the stream.
// The tools are those of mcp-upstream.ts (echo free, weather fixed, report by bytes), counted as served.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js'
import { buildServer } from './mcp-upstream.ts'

export interface McpSseUpstream {
  /** The server's base URL (the endpoint's upstream_url): streams at `${url}/sse`. */
  url: string
  served: Map<string, number>
  /** Every JSON-RPC message POSTed to a session. */
  messages: unknown[]
  /** Sessions opened (GET streams). */
  sessions(): number
  close(): Promise<void>
}

/** @param prefix the path both the stream and the messages URL live under ('' or e.g. '/mcp'). */
export async function startMcpSseUpstream(options: { prefix?: string } = {}): Promise<McpSseUpstream> {
  const prefix = options.prefix ?? ''
  const served = new Map<string, number>()
  const messages: unknown[] = []
  const transports = new Map<string, SSEServerTransport>()
  let opened = 0
  const http = createServer((req, res) => {
    void (async () => {
      const url = new URL(req.url ?? '/', 'http://x')
      if (req.method === 'GET' && url.pathname === `${prefix}/sse`) {
        const t = new SSEServerTransport(`${prefix}/messages`, res)
        transports.set(t.sessionId, t)
        opened++
        res.on('close', () => transports.delete(t.sessionId))
        await buildServer(served).connect(t)
        return
      }
      if (req.method === 'POST' && url.pathname === `${prefix}/messages`) {
        const t = transports.get(url.searchParams.get('sessionId') ?? '')
        if (t === undefined) return void res.writeHead(404).end('no such session')
        const chunks: Buffer[] = []
        for await (const c of req) chunks.push(c as Buffer)
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
        messages.push(body)
        await t.handlePostMessage(req, res, body)
        return
      }
      res.writeHead(404).end(`no route ${req.method} ${url.pathname}`)
    })().catch((err) => {
      if (!res.headersSent) res.writeHead(500).end(String(err))
    })
  })
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve))
  const { port } = http.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}${prefix}`,
    served,
    messages,
    sessions: () => opened,
    async close() {
      for (const t of transports.values()) await t.close().catch(() => {})
      http.closeAllConnections()
      await new Promise<void>((resolve) => http.close(() => resolve()))
    },
  }
}
