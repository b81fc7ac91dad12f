// The chaos runs' MCP server: the published @modelcontextprotocol/sdk server, stateless (a server and transport
// per request, as the SDK's stateless example does: any instance may carry any call), with three tools that
// count each execution by the `ref` argument the caller gives: `echo` (free), `weather` (a fixed price),
// `report` (priced by the bytes of its answer). `?sse=1` on the URL answers with an SSE stream, else JSON.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { z } from 'zod'

/** The report's text: its size makes its answer's byte count, and so its usage price. */
export const REPORT_TEXT = 'r'.repeat(1_000)

export interface CountingMcpServer {
  url: string
  /** Executions by `tool:ref`. */
  executed: Map<string, number>
  close(): Promise<void>
}

export async function startCountingMcpServer(): Promise<CountingMcpServer> {
  const executed = new Map<string, number>()
  const count = (tool: string, ref: string) => {
    const key = `${tool}:${ref}`
    executed.set(key, (executed.get(key) ?? 0) + 1)
  }
  const http = createServer((req, res) => {
    const parts: Buffer[] = []
    req.on('data', (c: Buffer) => parts.push(c))
    req.on('end', () => {
      void (async () => {
        const server = new McpServer({ name: 'chaos-mcp', version: '1.0.0' })
        const ref = { ref: z.string() }
        server.registerTool('echo', { description: 'Free', inputSchema: ref }, async (a) => {
          count('echo', a.ref)
          return { content: [{ type: 'text', text: a.ref }] }
        })
        server.registerTool('weather', { description: 'Fixed price', inputSchema: ref }, async (a) => {
          count('weather', a.ref)
          return { content: [{ type: 'text', text: `sunny for ${a.ref}` }] }
        })
        server.registerTool('report', { description: 'Priced by its bytes', inputSchema: ref }, async (a) => {
          count('report', a.ref)
          return { content: [{ type: 'text', text: REPORT_TEXT }] }
        })
        const transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: undefined,
          enableJsonResponse: !(req.url ?? '').includes('sse=1'),
        })
        res.on('close', () => {
          void transport.close()
          void server.close()
        })
        await server.connect(transport)
        const text = Buffer.concat(parts).toString('utf8')
        await transport.handleRequest(req, res, text ? JSON.parse(text) : undefined)
      })().catch((err) => {
        if (!res.headersSent) res.writeHead(500).end(String(err))
      })
    })
  })
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve))
  const { port } = http.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    executed,
    async close() {
      http.closeAllConnections()
      await new Promise<void>((resolve) => http.close(() => resolve()))
    },
  }
}
