from django.apps import AppConfig


class FrontConfig(AppConfig):
    """The front page (what is happening now, live) and link previews (Open Graph tags and their loss image)."""

    name = "webapp.front"
    label = "front"

    def ready(self):
        from webapp.front import moments as sources
        from webapp.front import previews
        from webapp.runs import extensions, moments

        for source in sources.SOURCES:
            moments.register(source)
        extensions.add_preview_meta(previews.meta)
