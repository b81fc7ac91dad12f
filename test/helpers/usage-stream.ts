// The OpenAI-style streaming answer the upto tests meter: `chunks` content chunks as server-sent events, then
// the usage chunk with its total, then [DONE]; and a plain node server on 127.0.0.1 to answer with it.
import type { Server, ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface Usage {
  prompt_tokens: number
  completion_tokens: number
}

/** Writes the whole stream and ends the answer. */
export function writeUsageStream(res: ServerResponse, chunks: number, usage: Usage): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
  for (let i = 0; i < chunks; i++) {
    const chunk = {
      id: 'c1',
      object: 'chat.completion.chunk',
      choices: [{ index: 0, delta: { content: `t${i} ` } }],
    }
    res.write(`data: ${JSON.stringify(chunk)}\n\n`)
  }
  const total = { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens }
  res.write(
    `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', choices: [], usage: total })}\n\n`,
  )
  res.end('data: [DONE]\n\n')
}

/** Listens `server` on 127.0.0.1 (port 0). */
export function listenLocal(server: Server): Promise<{ url: string; close(): Promise<void> }> {
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo
      resolve({ url: `http://127.0.0.1:${port}`, close: () => new Promise((r) => server.close(() => r())) })
    })
  })
}
