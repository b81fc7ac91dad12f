// Tests read JSON bodies whose shapes they assert; let Response.json() be `any` there (not in src/).
export {}

declare global {
  interface Body {
    json(): Promise<any>
  }
  interface Response {
    json(): Promise<any>
  }
}
