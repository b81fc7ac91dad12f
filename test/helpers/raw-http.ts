// Raw HTTP/1.1 over a socket, for what fetch() would never send: conflicting framing, oversized or slow
// headers, requests smuggled behind a bad one. Reads until the server closes or the wait runs out.
import { connect, type Socket } from 'node:net'

export interface RawResult {
  status: number | null
  text: string
  headers: Record<string, string>
  /** ms from the first byte sent to the server's close, or null if still open at the deadline. */
  closedAfterMs: number | null
}

/** Sends `head` (+ `body`), collects the answer until the server closes or `waitMs` passes. */
export function raw(url: string, head: string, body = '', waitMs = 3000, keep?: (s: Socket) => void) {
  const { hostname, port } = new URL(url)
  return new Promise<RawResult>((resolve) => {
    const socket = connect(Number(port), hostname)
    const started = Date.now()
    let text = ''
    const finish = (closed: boolean) => {
      clearTimeout(timer)
      const status = /^HTTP\/1\.1 (\d{3})/.exec(text)
      const headers: Record<string, string> = {}
      for (const line of text.split('\r\n\r\n')[0]!.split('\r\n').slice(1)) {
        const i = line.indexOf(':')
        if (i > 0) headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim()
      }
      resolve({
        status: status ? Number(status[1]) : null,
        text,
        headers,
        closedAfterMs: closed ? Date.now() - started : null,
      })
    }
    const timer = setTimeout(() => {
      socket.destroy()
      finish(false)
    }, waitMs)
    socket.setEncoding('latin1')
    socket.on('data', (d: string) => {
      text += d
    })
    socket.on('error', () => {})
    socket.on('close', () => finish(true))
    socket.write(head + body)
    keep?.(socket)
  })
}

export const jsonBody = (r: RawResult) => JSON.parse(r.text.slice(r.text.indexOf('\r\n\r\n') + 4))
