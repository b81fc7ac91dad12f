// A JSON-RPC proxy on loopback that counts the methods passing through (batches included), so tests
// can assert how many RPC calls the code under test really made.
import { createServer, type Server } from 'node:http'

export interface CountingProxy {
  url: string
  /** Calls seen per JSON-RPC method. */
  counts: Map<string, number>
  /** HTTP requests seen (a batch is one). */
  requests: number
  /** While true, every request fails with 503, as a node behind a load balancer going down would. */
  failing: boolean
  close(): Promise<void>
}

export async function startCountingProxy(targetUrl: string): Promise<CountingProxy> {
  const counts = new Map<string, number>()
  const proxy = { counts, requests: 0, failing: false } as CountingProxy
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const body = Buffer.concat(chunks).toString('utf8')
    proxy.requests++
    if (proxy.failing) {
      res.writeHead(503).end('unavailable')
      return
    }
    const parsed = JSON.parse(body) as { method: string } | Array<{ method: string }>
    for (const call of Array.isArray(parsed) ? parsed : [parsed]) {
      counts.set(call.method, (counts.get(call.method) ?? 0) + 1)
    }
    const upstream = await fetch(targetUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    })
    res.writeHead(upstream.status, { 'content-type': 'application/json' })
    res.end(await upstream.text())
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  proxy.url = `http://127.0.0.1:${port}`
  proxy.close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections()
      server.close(() => resolve())
    })
  return proxy
}
