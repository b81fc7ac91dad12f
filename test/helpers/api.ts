// Calls tollgate's HTTP API the way a client does (fetch, JSON, bearer key). No vitest import: the chaos
// runner (npm run chaos) uses it outside vitest too.

export interface ApiInit {
  method?: string
  key?: string
  body?: unknown
  rawBody?: string | Buffer
  headers?: Record<string, string>
}

export interface ApiResult {
  status: number
  headers: Headers
  body: any
  text: string
}

export async function callApi(base: string, path: string, init: ApiInit = {}): Promise<ApiResult> {
  const headers: Record<string, string> = { ...init.headers }
  if (init.key) headers.authorization = `Bearer ${init.key}`
  let body: string | Buffer | undefined
  if (init.rawBody !== undefined) body = init.rawBody
  else if (init.body !== undefined) {
    body = JSON.stringify(init.body)
    headers['content-type'] ??= 'application/json'
  }
  const res = await fetch(`${base}${path}`, { method: init.method ?? (body ? 'POST' : 'GET'), headers, body })
  const text = await res.text()
  let parsed: unknown = null
  try {
    parsed = text ? JSON.parse(text) : null
  } catch {
    parsed = null
  }
  return { status: res.status, headers: res.headers, body: parsed, text }
}

/** POSTs JSON and returns the parsed answer; anything but 2xx throws with the status and body. */
export async function postJson(base: string, path: string, body: unknown, key?: string): Promise<any> {
  const r = await callApi(base, path, { body, key })
  if (r.status < 200 || r.status > 299) throw new Error(`${path}: ${r.status} ${r.text}`)
  return r.body
}
