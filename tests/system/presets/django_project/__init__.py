"""A throwaway Django 5.2 project: django-tasks with its database backend, for the preset's proof."""
