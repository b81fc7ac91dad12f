// A stand-in OTLP/HTTP collector for `BENCH_TRACING=1`: accepts trace exports on 127.0.0.1 and counts spans.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface OtlpSink {
  url: string
  spans(): number
  close(): Promise<void>
}

export async function startOtlpSink(): Promise<OtlpSink> {
  let spans = 0
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8')
      // Counting "spanId" keys is enough here: the figure is a sanity check that tracing really ran.
      spans += text.split('"spanId"').length - 1
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans: () => spans,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
