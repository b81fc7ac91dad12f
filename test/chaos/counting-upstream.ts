// The upstream of the chaos runs: counts every response it serves per proof (the client puts the proof
// in the query, since payment headers are never forwarded). 'ok' answers 200, 'fail' 500 (not counted:
// a 5xx is not a served call), 'hang' never answers (the proxy times out; not counted either).
import { createServer, type Server, type ServerResponse } from 'node:http'

export type UpstreamMode = 'ok' | 'fail' | 'hang'

export interface CountingUpstream {
  url: string
  /** Proof → times a 2xx was sent for it. */
  served: Map<string, number>
  setMode(mode: UpstreamMode): void
  close(): Promise<void>
}

export async function startCountingUpstream(): Promise<CountingUpstream> {
  const served = new Map<string, number>()
  const hanging = new Set<ServerResponse>()
  let mode: UpstreamMode = 'ok'
  const server: Server = createServer((req, res) => {
    const proof = new URL(req.url ?? '/', 'http://x').searchParams.get('p') ?? ''
    req.resume()
    if (mode === 'hang') {
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
    res.writeHead(200, { 'content-type': 'application/json' }).end(`{"proof":"${proof}"}`)
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  const { port } = server.address() as { port: number }
  return {
    url: `http://127.0.0.1:${port}`,
    served,
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
