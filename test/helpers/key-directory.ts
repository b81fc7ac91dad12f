// An HTTP message signatures directory on 127.0.0.1, port 0: serves the JWKs it is given and counts fetches.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface KeyDirectoryServer {
  url: string
  fetches: () => number
  setKeys(keys: object[]): void
  close(): Promise<void>
}

export async function startKeyDirectory(
  keys: object[],
  cacheControl = 'max-age=60',
): Promise<KeyDirectoryServer> {
  let current = keys
  let fetches = 0
  const server = createServer((req, res) => {
    if (req.url !== '/.well-known/http-message-signatures-directory') {
      res.writeHead(404).end()
      return
    }
    fetches++
    res.writeHead(200, {
      'content-type': 'application/http-message-signatures-directory+json',
      'cache-control': cacheControl,
    })
    res.end(JSON.stringify({ keys: current }))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/.well-known/http-message-signatures-directory`,
    fetches: () => fetches,
    setKeys(keys) {
      current = keys
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  }
}
