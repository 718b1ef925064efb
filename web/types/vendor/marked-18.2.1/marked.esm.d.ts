// The part of marked 18.2.1's API that markdown.js uses. tsc finds this
// file in place of the vendored (minified, untyped) marked.esm.js through
// the `rootDirs` of ../../../tsconfig.json.

/** A token handed to a renderer override. */
export interface RendererToken {
  text: string;
  href: string;
  title?: string | null;
}

export interface MarkedOptions {
  gfm?: boolean;
  breaks?: boolean;
  renderer?: {
    html?(token: { text: string }): string;
    image?(token: RendererToken): string;
  };
}

export class Marked {
  constructor(options?: MarkedOptions);
  /** Markdown to HTML (synchronous unless an async extension is used). */
  parse(text: string): string;
}
