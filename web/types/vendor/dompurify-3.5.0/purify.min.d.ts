// DOMPurify 3.5.0 as markdown.js uses it (see the `rootDirs` of
// ../../../tsconfig.json): a UMD file that, loaded as a module, sets
// `globalThis.DOMPurify`, a factory of sanitisers.

export {};

declare global {
  interface DOMPurifyHookData {
    attrName: string;
    attrValue: string;
    keepAttr: boolean;
  }

  interface DOMPurifyConfig {
    ALLOWED_TAGS?: string[];
    ALLOWED_ATTR?: string[];
    ALLOW_DATA_ATTR?: boolean;
    RETURN_DOM_FRAGMENT: true;
  }

  interface DOMPurifyInstance {
    addHook(name: 'uponSanitizeAttribute', hook: (node: Element, data: DOMPurifyHookData) => void): void;
    addHook(name: 'afterSanitizeAttributes', hook: (node: Element) => void): void;
    sanitize(dirty: string, config: DOMPurifyConfig): DocumentFragment;
  }

  /** Set by the vendored purify.min.js when it is imported. */
  var DOMPurify: (window: Window) => DOMPurifyInstance;
}
