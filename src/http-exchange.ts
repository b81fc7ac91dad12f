// The plain request/response shapes that pass between the data plane's uWS app and the control-plane
// handler. A leaf module, so the two planes share types without importing each other.

export interface ApiRequest {
  method: string
  /** Path below the mount point, e.g. '/api/v1/endpoints/ep_123'. */
  path: string
  /** Raw query string without '?'. */
  query: string
  /** Lowercase header names. */
  headers: Readonly<Record<string, string>>
  /** The whole body (bounded by server.body_limit_bytes before the handler sees it). */
  body: Buffer
  remoteAddress: string
  requestId: string
}

export interface ApiResponse {
  status: number
  headers: Record<string, string>
  body: string
  /** The request's API key authenticated (the edge stops counting that key's address against it). */
  authenticated?: boolean
}

export type ApiHandler = (request: ApiRequest) => Promise<ApiResponse>
