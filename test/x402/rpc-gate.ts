// A JSON-RPC proxy on loopback in front of anvil that can refuse broadcasts (eth_sendRawTransaction) while
// answering every read: an RPC provider rejecting transactions for a while, as during an outage of its
// sequencer path.
import { createServer, type Server } from 'node:http'

export interface RpcGate {
  url: string
  /** While true, any request carrying eth_sendRawTransaction is answered 503. */
  refuseBroadcasts: boolean
  refused: number
  close(): Promise<void>
}

export async function startRpcGate(targetUrl: string): Promise<RpcGate> {
  const gate = { refuseBroadcasts: false, refused: 0 } as RpcGate
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const body = Buffer.concat(chunks).toString('utf8')
    if (gate.refuseBroadcasts && body.includes('eth_sendRawTransaction')) {
      gate.refused++
      res.writeHead(503).end('broadcasts refused')
      return
    }
    try {
      const upstream = await fetch(targetUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      })
      res.writeHead(upstream.status, { 'content-type': 'application/json' })
      res.end(await upstream.text())
    } catch {
      res.writeHead(502).end('upstream unreachable')
    }
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  gate.url = `http://127.0.0.1:${port}`
  gate.close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections()
      server.close(() => resolve())
    })
  return gate
}
