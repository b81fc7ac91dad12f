// A local OTLP/HTTP trace receiver on 127.0.0.1:0: decodes the JSON export the exporter sends to /v1/traces.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { waitFor } from './wait-for.ts'

export interface ReceivedSpan {
  traceId: string
  spanId: string
  parentSpanId: string
  name: string
  kind: number
  attributes: Record<string, unknown>
  service: unknown
}

export interface OtlpReceiver {
  /** Base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it. */
  url: string
  spans: ReceivedSpan[]
  contentTypes: string[]
  waitFor(match: (spans: ReceivedSpan[]) => boolean, timeoutMs?: number): Promise<void>
  close(): Promise<void>
}

type KeyValue = { key: string; value: Record<string, unknown> }

function attributesOf(list: KeyValue[] | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const { key, value } of list ?? []) out[key] = Object.values(value)[0]
  return out
}

/** OTLP/JSON carries ids as hex; accept base64 too, in case an exporter sends protobuf-style JSON. */
function hexId(id: string | undefined): string {
  if (!id) return ''
  return /^[0-9a-f]+$/i.test(id) ? id.toLowerCase() : Buffer.from(id, 'base64').toString('hex')
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = []
  const contentTypes: string[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      contentTypes.push(req.headers['content-type'] ?? '')
      if (req.url !== '/v1/traces' || !req.headers['content-type']?.includes('json')) {
        res.writeHead(415).end()
        return
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
      for (const rs of body.resourceSpans ?? []) {
        const service = attributesOf(rs.resource?.attributes)['service.name']
        for (const ss of rs.scopeSpans ?? []) {
          for (const s of ss.spans ?? []) {
            spans.push({
              traceId: hexId(s.traceId),
              spanId: hexId(s.spanId),
              parentSpanId: hexId(s.parentSpanId),
              name: s.name,
              kind: s.kind,
              attributes: attributesOf(s.attributes),
              service,
            })
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    contentTypes,
    async waitFor(match, timeoutMs = 10_000) {
      await waitFor(() => match(spans), {
        timeoutMs,
        intervalMs: 50,
        what: () => `matching spans; received: ${spans.map((s) => s.name).join(', ')}`,
      })
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
