// The part of highlight.js 11.12.0's API that markdown.js uses (see the
// `rootDirs` of ../../../tsconfig.json).

export interface HighlightResult {
  /** HTML: the source with `<span class="hljs-…">` around tokens. */
  value: string;
}

declare const hljs: {
  getLanguage(name: string): object | undefined;
  highlight(code: string, options: { language: string; ignoreIllegals?: boolean }): HighlightResult;
};
export default hljs;
