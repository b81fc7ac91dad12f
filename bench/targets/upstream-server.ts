// The benchmark's upstream: a plain node:http server answering JSON bodies of a fixed size (/data ~80 B,
// /1k, /256k), in its own process so it never shares an event loop with the proxy or the load generator.
// Prints its port, exits after MAX_MS.
import { createServer } from 'node:http'

const small = Buffer.from(JSON.stringify({ ok: true, data: 'x'.repeat(64) }))
const sized = (bytes: number) => Buffer.from(JSON.stringify({ data: 'x'.repeat(bytes - 11) }))
const bodies: Record<string, Buffer> = { '/data': small, '/1k': sized(1024), '/256k': sized(256 * 1024) }
const server = createServer((req, res) => {
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
