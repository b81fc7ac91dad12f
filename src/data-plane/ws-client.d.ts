// The part of the `ws` client (v8, in node_modules through the MCP SDK) that ws-session.ts uses; `ws` ships no
// types of its own and @types/ws is not installed. Remove once `ws` and @types/ws are direct dependencies.
declare module 'ws' {
  import { EventEmitter } from 'node:events'
  import type { IncomingMessage } from 'node:http'

  interface ClientOptions {
    headers?: Record<string, string>
    maxPayload?: number
    handshakeTimeout?: number
    perMessageDeflate?: boolean
    followRedirects?: boolean
    lookup?: typeof import('node:dns').lookup | ((hostname: string, options: object, callback: never) => void)
  }

  class WebSocket extends EventEmitter {
    constructor(address: string, protocols: string[], options: ClientOptions)
    static readonly OPEN: 1
    readonly bufferedAmount: number
    readonly protocol: string
    readonly readyState: 0 | 1 | 2 | 3
    readonly isPaused: boolean
    send(data: Buffer, options: { binary: boolean }): void
    ping(data?: Buffer): void
    pong(data?: Buffer): void
    close(code?: number, reason?: string): void
    terminate(): void
    pause(): void
    resume(): void
    on(event: 'open', listener: () => void): this
    on(event: 'message', listener: (data: Buffer, isBinary: boolean) => void): this
    on(event: 'ping' | 'pong', listener: (data: Buffer) => void): this
    on(event: 'close', listener: (code: number, reason: Buffer) => void): this
    on(event: 'error', listener: (err: Error & { code?: string }) => void): this
    on(event: 'unexpected-response', listener: (req: unknown, res: IncomingMessage) => void): this
  }
  export default WebSocket
}
