// A fetch Request as tollgate's data plane sees it, for the request-signature tests: the Host, the target and
// the lowercased headers, over https.
import { messageView } from '../../src/identity/message-view.ts'

export function viewOf(req: Request, host = new URL(req.url).host) {
  const headers: Record<string, string> = {}
  req.headers.forEach((v, k) => {
    headers[k] = v
  })
  const url = new URL(req.url)
  return messageView({
    method: req.method,
    scheme: 'https',
    host,
    target: url.pathname + url.search,
    headers,
  })
}
