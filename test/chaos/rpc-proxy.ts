// A TCP proxy in front of the chain RPC that can be cut: 'pass' forwards, 'refuse' stops listening (new
// connections get ECONNREFUSED, open ones are reset), 'blackhole' accepts and never answers.
import { connect, createServer, type Server, type Socket } from 'node:net'

export type RpcMode = 'pass' | 'refuse' | 'blackhole'

export interface RpcProxy {
  url: string
  mode(): RpcMode
  setMode(mode: RpcMode): Promise<void>
  close(): Promise<void>
}

export async function startRpcProxy(target: string): Promise<RpcProxy> {
  const { hostname, port: targetPort } = new URL(target)
  const sockets = new Set<Socket>()
  let mode: RpcMode = 'pass'
  const server: Server = createServer((client) => {
    sockets.add(client)
    client.on('close', () => sockets.delete(client))
    client.on('error', () => {})
    // Black-holed: the bytes go nowhere and nothing comes back, until the client gives up.
    if (mode === 'blackhole') return client.resume()
    const upstream = connect(Number(targetPort), hostname)
    sockets.add(upstream)
    upstream.on('close', () => sockets.delete(upstream))
    upstream.on('error', () => client.destroy())
    client.on('close', () => upstream.destroy())
    upstream.on('close', () => client.destroy())
    client.pipe(upstream)
    upstream.pipe(client)
  })
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, '127.0.0.1', () => {
        server.removeListener('error', reject)
        resolve()
      })
    })
  let port = 0
  await listen()
  port = (server.address() as { port: number }).port
  const dropAll = () => {
    for (const s of sockets) s.destroy()
    sockets.clear()
  }
  return {
    url: `http://127.0.0.1:${port}`,
    mode: () => mode,
    async setMode(next) {
      if (next === mode) return
      const was = mode
      mode = next
      dropAll()
      if (next === 'refuse') await new Promise<void>((r) => server.close(() => r()))
      else if (was === 'refuse') await listen()
    },
    async close() {
      dropAll()
      if (mode !== 'refuse') await new Promise<void>((r) => server.close(() => r()))
    },
  }
}
