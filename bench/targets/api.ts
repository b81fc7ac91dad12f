// POSTs JSON to a tollgate instance's API as a merchant would (bearer key); anything but 2xx throws,
// naming the instance.
export async function postJson(base: string, label: string, path: string, body: unknown, key?: string) {
  const r = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify(body),
  })
  if (!r.ok) throw new Error(`${label} ${path}: ${r.status} ${await r.text()}`)
  return r.json()
}
